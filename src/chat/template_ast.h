#pragma once
// The syntax tree of a parsed template: expressions and statements, each with the source position it started at.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "chat/template_lexer.h"
#include "chat/value.h"

namespace tern::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;
using KeywordExprs = std::vector<std::pair<std::string, ExprPtr>>;

// `f(*args, **kwargs)`: a sequence unpacked after the positional arguments and a mapping after the keyword
// arguments (null when absent).
struct Unpacked {
  ExprPtr args;
  ExprPtr kwargs;
};

// `| name(args)`: one filter application, in an expression or on a filter/set block.
struct FilterCall {
  std::string name;
  std::vector<ExprPtr> args;
  KeywordExprs kwargs;
  Unpacked unpacked;
  SourcePos pos;
};

struct Expr {
  enum class Kind {
    kLiteral,      // literal
    kName,         // name
    kList,         // items
    kTuple,        // items
    kDict,         // items: key, value, key, value...
    kUnary,        // name is "-" or "+", a
    kBinary,       // name is the operator, a, b
    kCompare,      // a, then comparisons: ops[i] against items[i] (chained like Python)
    kAnd,          // a, b
    kOr,           // a, b
    kNot,          // a
    kConditional,  // a if b else c (c may be null)
    kGetAttr,      // a.name
    kGetItem,      // a[b]
    kSlice,        // a[items[0]:items[1]:items[2]], missing parts are null
    kCall,         // a(items, kwargs, *unpacked.args, **unpacked.kwargs)
    kFilter,       // a | filter
    kTest,         // a is [not] name(items, kwargs, unpacked), negated
  };

  Kind kind;
  SourcePos pos;
  Value literal;
  std::string name;
  std::vector<ExprPtr> items;
  KeywordExprs kwargs;
  Unpacked unpacked;
  std::vector<std::string> ops;
  ExprPtr a, b, c;
  FilterCall filter;
  bool negated = false;
};

struct Stmt;
using StmtList = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // branches (condition, body) in order; a null condition is the else branch
    kFor,          // for targets in expr [if condition] [recursive]: body [else else_body]
    kSet,          // set targets = expr, or set targets[0].target_attr = expr
    kSetBlock,     // set targets[0] [| filters]: body
    kMacro,        // macro targets[0](params): body
    kCallBlock,    // call(params) expr: body, where body is `caller`
    kFilterBlock,  // filter filters: body
    kWith,         // with params: body, in a scope of its own
    kScope,        // a block rendered in place (generation)
    kBreak,
    kContinue,
  };

  Kind kind;
  SourcePos pos;
  std::string text;
  ExprPtr expr;
  ExprPtr condition;
  std::vector<std::string> targets;
  std::string target_attr;
  std::vector<std::pair<ExprPtr, StmtList>> branches;
  StmtList body;
  StmtList else_body;
  KeywordExprs params;  // macro parameters with optional defaults (null when none); with-assignments
  std::vector<FilterCall> filters;
  bool recursive = false;  // kFor: the loop object is callable, rendering the body over nested items
};

}  // namespace tern::chat
