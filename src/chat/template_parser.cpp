#include "chat/template_parser.h"

#include <algorithm>

#include "core/error.h"

namespace tern::chat {
namespace {

// Nesting deeper than this is a malformed (or hostile) template, not a chat format.
constexpr int kMaxNestingDepth = 200;

class Parser {
 public:
  explicit Parser(const std::vector<Token>& tokens) : tokens_(tokens) {}

  StmtList parse_all() {
    std::string end_tag;
    StmtList body = parse_body({}, end_tag);
    return body;
  }

 private:
  // ---- token helpers ----
  const Token& current() const { return tokens_[index_]; }
  const Token& peek(size_t ahead = 1) const { return tokens_[std::min(index_ + ahead, tokens_.size() - 1)]; }
  const Token& advance() {
    const Token& token = tokens_[index_];
    if (index_ + 1 < tokens_.size()) ++index_;
    return token;
  }
  bool at_operator(std::string_view op) const {
    return current().kind == TokenKind::kOperator && current().text == op;
  }
  bool at_name(std::string_view name) const { return current().kind == TokenKind::kName && current().text == name; }
  bool skip_operator(std::string_view op) {
    if (!at_operator(op)) return false;
    advance();
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!at_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void error(const SourcePos& pos, const std::string& message) const {
    fail("chat template syntax error at line {}, column {}: {}", pos.line, pos.column, message);
  }
  [[noreturn]] void unexpected(const std::string& expected) const {
    error(current().pos, "expected " + expected + ", got " + describe_token(current()));
  }
  void expect_operator(std::string_view op) {
    if (!skip_operator(op)) unexpected("'" + std::string(op) + "'");
  }
  std::string expect_name() {
    if (current().kind != TokenKind::kName) unexpected("a name");
    return advance().text;
  }
  void expect_block_end() {
    if (current().kind != TokenKind::kBlockEnd) unexpected("'%}'");
    advance();
  }

  struct DepthGuard {
    DepthGuard(Parser& parser, const SourcePos& pos) : parser(parser) {
      if (++parser.depth_ > kMaxNestingDepth) parser.error(pos, "template nested too deeply");
    }
    ~DepthGuard() { --parser.depth_; }
    Parser& parser;
  };

  static ExprPtr make(Expr::Kind kind, const SourcePos& pos) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->pos = pos;
    return expr;
  }
  static std::unique_ptr<Stmt> make_stmt(Stmt::Kind kind, const SourcePos& pos) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->pos = pos;
    return stmt;
  }

  // ---- statements ----

  // Parses until one of `end_names` opens a block tag (consumed up to and including the name, stored in end_tag).
  StmtList parse_body(const std::vector<std::string_view>& end_names, std::string& end_tag) {
    DepthGuard guard(*this, current().pos);
    StmtList body;
    while (true) {
      const Token& token = current();
      switch (token.kind) {
        case TokenKind::kText: {
          auto stmt = make_stmt(Stmt::Kind::kText, token.pos);
          stmt->text = token.text;
          body.push_back(std::move(stmt));
          advance();
          break;
        }
        case TokenKind::kVariableBegin: {
          advance();
          auto stmt = make_stmt(Stmt::Kind::kOutput, token.pos);
          stmt->expr = parse_tuple(true);
          if (current().kind != TokenKind::kVariableEnd) unexpected("'}}'");
          advance();
          body.push_back(std::move(stmt));
          break;
        }
        case TokenKind::kBlockBegin: {
          const Token& name = peek();
          if (name.kind != TokenKind::kName) error(name.pos, "expected a tag name after '{%'");
          if (std::find(end_names.begin(), end_names.end(), name.text) != end_names.end()) {
            advance();
            advance();
            end_tag = name.text;
            return body;
          }
          advance();
          body.push_back(parse_statement());
          break;
        }
        case TokenKind::kEnd:
          if (!end_names.empty()) {
            std::string expected;
            for (auto n : end_names) expected += (expected.empty() ? "'" : " or '") + std::string(n) + "'";
            error(token.pos, "unexpected end of template, expected " + expected);
          }
          return body;
        default: error(token.pos, "unexpected " + describe_token(token));
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& name_token = advance();
    const std::string& tag = name_token.text;
    SourcePos pos = name_token.pos;
    if (tag == "if") return parse_if(pos);
    if (tag == "for") return parse_for(pos);
    if (tag == "set") return parse_set(pos);
    if (tag == "macro") return parse_macro(pos);
    if (tag == "call") return parse_call_block(pos);
    if (tag == "filter") return parse_filter_block(pos);
    if (tag == "with") return parse_with(pos);
    if (tag == "generation") {
      // Hugging Face's AssistantTracker marks assistant text with this tag; it renders its body in place.
      expect_block_end();
      auto stmt = make_stmt(Stmt::Kind::kScope, pos);
      std::string end_tag;
      stmt->body = parse_body({"endgeneration"}, end_tag);
      expect_block_end();
      return stmt;
    }
    if (tag == "break" || tag == "continue") {
      if (loop_depth_ == 0) error(pos, "'" + tag + "' outside of a for loop");
      expect_block_end();
      return make_stmt(tag == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, pos);
    }
    error(pos, "unknown tag '" + tag + "'");
  }

  std::unique_ptr<Stmt> parse_if(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kIf, pos);
    ExprPtr condition = parse_tuple(true);
    while (true) {
      expect_block_end();
      std::string end_tag;
      StmtList body = parse_body({"elif", "else", "endif"}, end_tag);
      stmt->branches.emplace_back(std::move(condition), std::move(body));
      if (end_tag == "elif") {
        condition = parse_tuple(true);
      } else if (end_tag == "else") {
        expect_block_end();
        StmtList else_body = parse_body({"endif"}, end_tag);
        stmt->branches.emplace_back(nullptr, std::move(else_body));
        break;
      } else {
        break;
      }
    }
    expect_block_end();
    return stmt;
  }

  std::vector<std::string> parse_target_names() {
    std::vector<std::string> names;
    bool parenthesized = skip_operator("(");
    do {
      names.push_back(expect_name());
    } while (skip_operator(","));
    if (parenthesized) expect_operator(")");
    return names;
  }

  std::unique_ptr<Stmt> parse_for(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kFor, pos);
    stmt->targets = parse_target_names();
    if (!skip_name("in")) unexpected("'in'");
    stmt->expr = parse_tuple(false);
    if (skip_name("if")) stmt->condition = parse_tuple(true);
    stmt->recursive = skip_name("recursive");
    expect_block_end();
    ++loop_depth_;
    std::string end_tag;
    stmt->body = parse_body({"else", "endfor"}, end_tag);
    --loop_depth_;
    if (end_tag == "else") {
      expect_block_end();
      stmt->else_body = parse_body({"endfor"}, end_tag);
    }
    expect_block_end();
    return stmt;
  }

  std::unique_ptr<Stmt> parse_set(const SourcePos& pos) {
    std::string first = expect_name();
    if (skip_operator(".")) {
      auto stmt = make_stmt(Stmt::Kind::kSet, pos);
      stmt->targets = {first};
      stmt->target_attr = expect_name();
      expect_operator("=");
      stmt->expr = parse_tuple(true);
      expect_block_end();
      return stmt;
    }
    std::vector<std::string> targets = {first};
    while (skip_operator(",")) targets.push_back(expect_name());
    if (skip_operator("=")) {
      auto stmt = make_stmt(Stmt::Kind::kSet, pos);
      stmt->targets = std::move(targets);
      stmt->expr = parse_tuple(true);
      expect_block_end();
      return stmt;
    }
    if (targets.size() != 1) unexpected("'='");
    auto stmt = make_stmt(Stmt::Kind::kSetBlock, pos);
    stmt->targets = std::move(targets);
    while (skip_operator("|")) stmt->filters.push_back(parse_filter_call());
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endset"}, end_tag);
    expect_block_end();
    return stmt;
  }

  KeywordExprs parse_parameters() {
    KeywordExprs params;
    expect_operator("(");
    while (!at_operator(")")) {
      if (!params.empty()) expect_operator(",");
      if (at_operator(")")) break;
      std::string name = expect_name();
      ExprPtr default_value;
      if (skip_operator("=")) {
        default_value = parse_expression(true);
      } else if (!params.empty() && params.back().second) {
        error(current().pos, "parameter '" + name + "' without a default follows one with a default");
      }
      params.emplace_back(std::move(name), std::move(default_value));
    }
    expect_operator(")");
    return params;
  }

  std::unique_ptr<Stmt> parse_macro(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kMacro, pos);
    stmt->targets = {expect_name()};
    stmt->params = parse_parameters();
    expect_block_end();
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    std::string end_tag;
    stmt->body = parse_body({"endmacro"}, end_tag);
    loop_depth_ = saved_loop_depth;
    expect_block_end();
    return stmt;
  }

  std::unique_ptr<Stmt> parse_call_block(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kCallBlock, pos);
    if (at_operator("(")) stmt->params = parse_parameters();
    stmt->expr = parse_expression(true);
    if (stmt->expr->kind != Expr::Kind::kCall) error(stmt->expr->pos, "expected a call after '{% call %}'");
    expect_block_end();
    int saved_loop_depth = std::exchange(loop_depth_, 0);
    std::string end_tag;
    stmt->body = parse_body({"endcall"}, end_tag);
    loop_depth_ = saved_loop_depth;
    expect_block_end();
    return stmt;
  }

  std::unique_ptr<Stmt> parse_filter_block(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kFilterBlock, pos);
    do {
      stmt->filters.push_back(parse_filter_call());
    } while (skip_operator("|"));
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endfilter"}, end_tag);
    expect_block_end();
    return stmt;
  }

  std::unique_ptr<Stmt> parse_with(const SourcePos& pos) {
    auto stmt = make_stmt(Stmt::Kind::kWith, pos);
    while (current().kind != TokenKind::kBlockEnd) {
      if (!stmt->params.empty()) expect_operator(",");
      std::string name = expect_name();
      expect_operator("=");
      stmt->params.emplace_back(std::move(name), parse_expression(true));
    }
    expect_block_end();
    std::string end_tag;
    stmt->body = parse_body({"endwith"}, end_tag);
    expect_block_end();
    return stmt;
  }

  // ---- expressions ----

  // An expression, or several separated by commas (a tuple, represented as a list).
  ExprPtr parse_tuple(bool with_condexpr) {
    SourcePos pos = current().pos;
    ExprPtr first = parse_expression(with_condexpr);
    if (!at_operator(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, pos);
    tuple->items.push_back(std::move(first));
    while (skip_operator(",")) {
      if (is_tuple_end()) break;
      tuple->items.push_back(parse_expression(with_condexpr));
    }
    return tuple;
  }

  bool is_tuple_end() const {
    TokenKind kind = current().kind;
    return kind == TokenKind::kVariableEnd || kind == TokenKind::kBlockEnd || at_operator(")") || at_name("if") ||
           at_name("in") || at_name("recursive");
  }

  ExprPtr parse_expression(bool with_condexpr) {
    DepthGuard guard(*this, current().pos);
    return with_condexpr ? parse_condexpr() : parse_or();
  }

  ExprPtr parse_condexpr() {
    ExprPtr expr = parse_or();
    while (at_name("if")) {
      SourcePos pos = advance().pos;
      auto conditional = make(Expr::Kind::kConditional, pos);
      conditional->a = std::move(expr);
      conditional->b = parse_or();
      if (skip_name("else")) conditional->c = parse_condexpr();
      expr = std::move(conditional);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (at_name("or")) {
      auto node = make(Expr::Kind::kOr, advance().pos);
      node->a = std::move(left);
      node->b = parse_and();
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (at_name("and")) {
      auto node = make(Expr::Kind::kAnd, advance().pos);
      node->a = std::move(left);
      node->b = parse_not();
      left = std::move(node);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (at_name("not")) {
      DepthGuard guard(*this, current().pos);
      auto node = make(Expr::Kind::kNot, advance().pos);
      node->a = parse_not();
      return node;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    SourcePos pos = current().pos;
    ExprPtr first = parse_math1();
    ExprPtr compare;
    while (true) {
      std::string op;
      if (current().kind == TokenKind::kOperator &&
          (current().text == "==" || current().text == "!=" || current().text == "<" || current().text == ">" ||
           current().text == "<=" || current().text == ">=")) {
        op = advance().text;
      } else if (at_name("in")) {
        advance();
        op = "in";
      } else if (at_name("not") && peek().kind == TokenKind::kName && peek().text == "in") {
        advance();
        advance();
        op = "not in";
      } else {
        break;
      }
      if (!compare) {
        compare = make(Expr::Kind::kCompare, pos);
        compare->a = std::move(first);
      }
      compare->ops.push_back(op);
      compare->items.push_back(parse_math1());
    }
    return compare ? std::move(compare) : std::move(first);
  }

  ExprPtr binary(std::string op, const SourcePos& pos, ExprPtr left, ExprPtr right) {
    auto node = make(Expr::Kind::kBinary, pos);
    node->name = std::move(op);
    node->a = std::move(left);
    node->b = std::move(right);
    return node;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (at_operator("+") || at_operator("-")) {
      const Token& op = advance();
      left = binary(op.text, op.pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_math2();
    while (at_operator("~")) {
      const Token& op = advance();
      left = binary("~", op.pos, std::move(left), parse_math2());
    }
    return left;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (at_operator("*") || at_operator("/") || at_operator("//") || at_operator("%")) {
      const Token& op = advance();
      left = binary(op.text, op.pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (at_operator("**")) {
      const Token& op = advance();
      left = binary("**", op.pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this, current().pos);
    ExprPtr node;
    if (at_operator("-") || at_operator("+")) {
      const Token& op = advance();
      node = make(Expr::Kind::kUnary, op.pos);
      node->name = op.text;
      node->a = parse_unary(false);
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr parse_primary() {
    const Token& token = current();
    switch (token.kind) {
      case TokenKind::kName: {
        advance();
        auto node = make(Expr::Kind::kLiteral, token.pos);
        if (token.text == "true" || token.text == "True") {
          node->literal = Value(true);
        } else if (token.text == "false" || token.text == "False") {
          node->literal = Value(false);
        } else if (token.text == "none" || token.text == "None") {
          node->literal = Value::none();
        } else {
          node->kind = Expr::Kind::kName;
          node->name = token.text;
        }
        return node;
      }
      case TokenKind::kString: {
        auto node = make(Expr::Kind::kLiteral, token.pos);
        std::string text;
        while (current().kind == TokenKind::kString) text += advance().text;  // adjacent literals concatenate
        node->literal = Value(std::move(text));
        return node;
      }
      case TokenKind::kInteger: {
        advance();
        auto node = make(Expr::Kind::kLiteral, token.pos);
        try {
          node->literal = Value(static_cast<int64_t>(std::stoll(token.text)));
        } catch (const std::out_of_range&) {
          node->literal = Value::integer(*BigInt::from_decimal(token.text));
        }
        return node;
      }
      case TokenKind::kFloat: {
        advance();
        auto node = make(Expr::Kind::kLiteral, token.pos);
        node->literal = Value(std::stod(token.text));
        return node;
      }
      case TokenKind::kOperator:
        if (token.text == "(") {
          advance();
          if (skip_operator(")")) return make(Expr::Kind::kTuple, token.pos);
          ExprPtr inner = parse_tuple(true);
          expect_operator(")");
          return inner;
        }
        if (token.text == "[") {
          advance();
          auto node = make(Expr::Kind::kList, token.pos);
          while (!at_operator("]")) {
            if (!node->items.empty()) expect_operator(",");
            if (at_operator("]")) break;
            node->items.push_back(parse_expression(true));
          }
          expect_operator("]");
          return node;
        }
        if (token.text == "{") {
          advance();
          auto node = make(Expr::Kind::kDict, token.pos);
          while (!at_operator("}")) {
            if (!node->items.empty()) expect_operator(",");
            if (at_operator("}")) break;
            node->items.push_back(parse_expression(true));
            expect_operator(":");
            node->items.push_back(parse_expression(true));
          }
          expect_operator("}");
          return node;
        }
        break;
      default: break;
    }
    unexpected("an expression");
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (at_operator(".")) {
        SourcePos pos = advance().pos;
        if (current().kind == TokenKind::kInteger) {  // x.0 is x[0]
          auto item = make(Expr::Kind::kGetItem, pos);
          item->a = std::move(node);
          item->b = parse_primary();
          node = std::move(item);
          continue;
        }
        auto attr = make(Expr::Kind::kGetAttr, pos);
        attr->a = std::move(node);
        attr->name = expect_name();
        node = std::move(attr);
      } else if (at_operator("[")) {
        node = parse_subscript(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr node) {
    SourcePos pos = advance().pos;
    ExprPtr parts[3];
    int num_colons = 0;
    while (!at_operator("]")) {
      if (at_operator(":")) {
        if (++num_colons > 2) unexpected("']'");
        advance();
        continue;
      }
      if (parts[num_colons]) unexpected("':' or ']'");
      parts[num_colons] = parse_tuple(true);
    }
    advance();
    if (num_colons == 0) {
      if (!parts[0]) error(pos, "empty subscript");
      auto item = make(Expr::Kind::kGetItem, pos);
      item->a = std::move(node);
      item->b = std::move(parts[0]);
      return item;
    }
    auto slice = make(Expr::Kind::kSlice, pos);
    slice->a = std::move(node);
    for (auto& part : parts) slice->items.push_back(std::move(part));
    return slice;
  }

  // Python's order: positional arguments, keyword arguments, then `*sequence` and `**mapping`.
  void parse_call_args(std::vector<ExprPtr>& args, KeywordExprs& kwargs, Unpacked& unpacked) {
    expect_operator("(");
    bool need_comma = false;
    while (!at_operator(")")) {
      if (need_comma) expect_operator(",");
      if (at_operator(")")) break;
      need_comma = true;
      const SourcePos pos = current().pos;
      if (skip_operator("*")) {
        if (unpacked.args || unpacked.kwargs) error(pos, "'*' argument after another unpacked argument");
        unpacked.args = parse_expression(true);
      } else if (skip_operator("**")) {
        if (unpacked.kwargs) error(pos, "more than one '**' argument");
        unpacked.kwargs = parse_expression(true);
      } else if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator && peek().text == "=") {
        if (unpacked.args || unpacked.kwargs) error(pos, "keyword argument after an unpacked argument");
        std::string name = advance().text;
        advance();
        kwargs.emplace_back(std::move(name), parse_expression(true));
      } else {
        if (!kwargs.empty()) error(pos, "positional argument follows keyword argument");
        if (unpacked.args || unpacked.kwargs) error(pos, "positional argument after an unpacked argument");
        args.push_back(parse_expression(true));
      }
    }
    expect_operator(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::kCall, current().pos);
    call->a = std::move(callee);
    parse_call_args(call->items, call->kwargs, call->unpacked);
    return call;
  }

  FilterCall parse_filter_call() {
    FilterCall filter;
    filter.pos = current().pos;
    filter.name = expect_name();
    while (skip_operator(".")) filter.name += "." + expect_name();
    if (at_operator("(")) parse_call_args(filter.args, filter.kwargs, filter.unpacked);
    return filter;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (at_operator("|")) {
        advance();
        auto filtered = make(Expr::Kind::kFilter, current().pos);
        filtered->a = std::move(node);
        filtered->filter = parse_filter_call();
        node = std::move(filtered);
      } else if (at_name("is")) {
        node = parse_test(std::move(node));
      } else if (at_operator("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_test(ExprPtr node) {
    advance();  // is
    auto test = make(Expr::Kind::kTest, current().pos);
    test->a = std::move(node);
    test->negated = skip_name("not");
    test->name = expect_name();
    while (skip_operator(".")) test->name += "." + expect_name();
    const Token& next = current();
    bool starts_argument =
        (next.kind == TokenKind::kName && next.text != "else" && next.text != "or" && next.text != "and") ||
        next.kind == TokenKind::kString || next.kind == TokenKind::kInteger || next.kind == TokenKind::kFloat ||
        (next.kind == TokenKind::kOperator && (next.text == "[" || next.text == "{"));
    if (at_operator("(")) {
      parse_call_args(test->items, test->kwargs, test->unpacked);
    } else if (starts_argument) {
      if (at_name("is")) error(next.pos, "tests cannot be chained with 'is'");
      test->items.push_back(parse_postfix(parse_primary()));
    }
    return test;
  }

  const std::vector<Token>& tokens_;
  size_t index_ = 0;
  int depth_ = 0;
  int loop_depth_ = 0;
};

}  // namespace

StmtList parse_template(const std::vector<Token>& tokens) { return Parser(tokens).parse_all(); }

}  // namespace tern::chat
