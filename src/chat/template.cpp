#include "chat/template.h"

#include <fmt/format.h>

#include <memory>
#include <optional>

#include "chat/template_builtins.h"
#include "chat/template_parser.h"
#include "core/error.h"

namespace tern::chat {
namespace {

// The key under which a map holds the function that calling it runs (the loop object of a recursive loop).
constexpr const char* kCallKey = "__call__";

class Interpreter {
 public:
  Interpreter(const ValueMap& variables, const RenderLimits& limits) : limits_(limits) {
    frames_.push_back(builtin_globals());
    for (const auto& [name, value] : variables.entries()) frames_[0].set(name, value);
  }

  std::string render(const StmtList& body) {
    std::string out;
    exec_list(body, out);
    return out;
  }

 private:
  enum class Flow { kNormal, kBreak, kContinue };

  [[noreturn]] static void fail_at(const SourcePos& pos, const std::string& message) {
    fail("chat template error at line {}, column {}: {}", pos.line, pos.column, message);
  }

  // Runs `body` with the scope chain replaced by [root, captured..., frame]; restores it even on error.
  template <typename Body>
  Value with_frames(const std::vector<ValueMap>& captured, ValueMap frame, Body body) {
    if (++call_depth_ > limits_.max_call_depth) {
      --call_depth_;
      throw EvalError(fmt::format("macro calls nested deeper than {}", limits_.max_call_depth));
    }
    std::vector<ValueMap> saved(std::make_move_iterator(frames_.begin() + 1), std::make_move_iterator(frames_.end()));
    frames_.resize(1);
    frames_.insert(frames_.end(), captured.begin(), captured.end());
    frames_.push_back(std::move(frame));
    struct Restore {
      Interpreter& self;
      std::vector<ValueMap>& saved;
      ~Restore() {
        self.frames_.resize(1);
        self.frames_.insert(self.frames_.end(), std::make_move_iterator(saved.begin()),
                            std::make_move_iterator(saved.end()));
        --self.call_depth_;
      }
    } restore{*this, saved};
    return body();
  }

  // ---- statements ----

  Flow exec_list(const StmtList& body, std::string& out) {
    for (const auto& stmt : body) {
      Flow flow = exec(*stmt, out);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  void append(std::string& out, const std::string& text, const SourcePos& pos) {
    out += text;
    if (out.size() > limits_.max_output_bytes) {
      fail_at(pos, fmt::format("output longer than {} bytes", limits_.max_output_bytes));
    }
  }

  Flow exec(const Stmt& stmt, std::string& out) {
    switch (stmt.kind) {
      case Stmt::Kind::kText: append(out, stmt.text, stmt.pos); return Flow::kNormal;
      case Stmt::Kind::kOutput: append(out, eval(*stmt.expr).to_str(), stmt.pos); return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (const auto& [condition, body] : stmt.branches) {
          if (!condition || eval(*condition).truthy()) return exec_list(body, out);
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor: exec_for(stmt, out); return Flow::kNormal;
      case Stmt::Kind::kSet: exec_set(stmt); return Flow::kNormal;
      case Stmt::Kind::kSetBlock: {
        std::string body;
        exec_list(stmt.body, body);
        frames_.back().set(stmt.targets[0], apply_filters(stmt.filters, Value(std::move(body))));
        return Flow::kNormal;
      }
      case Stmt::Kind::kMacro: frames_.back().set(stmt.targets[0], make_macro(stmt)); return Flow::kNormal;
      case Stmt::Kind::kCallBlock: append(out, exec_call_block(stmt).to_str(), stmt.pos); return Flow::kNormal;
      case Stmt::Kind::kFilterBlock: {
        std::string body;
        exec_list(stmt.body, body);
        append(out, apply_filters(stmt.filters, Value(std::move(body))).to_str(), stmt.pos);
        return Flow::kNormal;
      }
      case Stmt::Kind::kWith: {
        ValueMap frame;
        for (const auto& [name, expr] : stmt.params) frame.set(name, eval(*expr));
        frames_.push_back(std::move(frame));
        Flow flow = exec_list(stmt.body, out);
        frames_.pop_back();
        return flow;
      }
      case Stmt::Kind::kScope: return exec_list(stmt.body, out);
      case Stmt::Kind::kBreak: return Flow::kBreak;
      case Stmt::Kind::kContinue: return Flow::kContinue;
    }
    return Flow::kNormal;
  }

  void bind_targets(ValueMap& frame, const std::vector<std::string>& targets, const Value& value,
                    const SourcePos& pos) {
    if (targets.size() == 1) {
      frame.set(targets[0], value);
      return;
    }
    ValueList items;
    try {
      items = iterate_value(value);
    } catch (const EvalError& e) {
      fail_at(pos, fmt::format("cannot unpack into {} names: {}", targets.size(), e.what()));
    }
    if (items.size() != targets.size()) {
      fail_at(pos, fmt::format("cannot unpack {} values into {} names", items.size(), targets.size()));
    }
    for (size_t i = 0; i < targets.size(); ++i) frame.set(targets[i], items[i]);
  }

  // What one run of a loop shares across its iterations: loop.changed()'s last arguments.
  struct LoopRun {
    std::optional<Value> last_changed;
  };

  Value make_loop_object(const Stmt& stmt, const ValueList& items, size_t index, int64_t depth,
                         const std::shared_ptr<LoopRun>& run) {
    auto length = static_cast<int64_t>(items.size());
    auto i = static_cast<int64_t>(index);
    ValueMap loop;
    loop.set("index0", Value(i));
    loop.set("index", Value(i + 1));
    loop.set("revindex0", Value(length - i - 1));
    loop.set("revindex", Value(length - i));
    loop.set("first", Value(i == 0));
    loop.set("last", Value(i == length - 1));
    loop.set("length", Value(length));
    loop.set("depth", Value(depth));
    loop.set("depth0", Value(depth - 1));
    loop.set("previtem", index > 0 ? items[index - 1] : Value::undefined("there is no previous item"));
    loop.set("nextitem", i + 1 < length ? items[index + 1] : Value::undefined("there is no next item"));
    loop.set("cycle", Value::function("loop.cycle", [index](const CallArgs& args) -> Value {
               if (args.positional.empty()) throw EvalError("loop.cycle() needs at least one item");
               return args.positional[index % args.positional.size()];
             }));
    loop.set("changed", Value::function("loop.changed", [run](const CallArgs& args) {
               Value arguments = Value::tuple(args.positional);
               if (run->last_changed && values_equal(*run->last_changed, arguments)) return Value(false);
               run->last_changed = std::move(arguments);
               return Value(true);
             }));
    // `loop(children)` in a recursive loop renders the loop body over `children`, one level deeper.
    loop.set(kCallKey, Value::function("loop", [this, &stmt, depth](const CallArgs& args) -> Value {
               if (!stmt.recursive) throw EvalError("Tried to call non recursive loop. Maybe you forgot the 'recursive' modifier.");
               if (args.positional.size() != 1 || !args.keyword.empty()) throw EvalError("loop() takes exactly one iterable");
               if (depth >= limits_.max_call_depth) {
                 throw EvalError(fmt::format("recursive loop nested deeper than {} levels", limits_.max_call_depth));
               }
               std::string out;
               run_loop(stmt, args.positional[0], depth + 1, out);
               return Value(std::move(out));
             }));
    return Value(std::move(loop));
  }

  void exec_for(const Stmt& stmt, std::string& out) { run_loop(stmt, std::nullopt, 1, out); }

  // Runs the loop over `iterable` (the statement's own expression when absent), at recursion `depth` (1 at the top).
  void run_loop(const Stmt& stmt, const std::optional<Value>& iterable, int64_t depth, std::string& out) {
    ValueList items;
    try {
      items = iterate_value(iterable ? *iterable : eval(*stmt.expr));
    } catch (const EvalError& e) {
      fail_at(stmt.expr->pos, e.what());
    }
    if (stmt.condition) {
      // `for x in xs if cond`: filtered before the loop, so loop.index and loop.length count kept items only.
      ValueList kept;
      for (const auto& item : items) {
        ValueMap frame;
        bind_targets(frame, stmt.targets, item, stmt.pos);
        frames_.push_back(std::move(frame));
        bool keep = false;
        try {
          keep = eval(*stmt.condition).truthy();
        } catch (...) {
          frames_.pop_back();
          throw;
        }
        frames_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec_list(stmt.else_body, out);
      return;
    }
    auto run = std::make_shared<LoopRun>();
    for (size_t i = 0; i < items.size(); ++i) {
      if (++iterations_ > limits_.max_loop_iterations) {
        fail_at(stmt.pos, fmt::format("more than {} loop iterations", limits_.max_loop_iterations));
      }
      ValueMap frame;
      frame.set("loop", make_loop_object(stmt, items, i, depth, run));
      bind_targets(frame, stmt.targets, items[i], stmt.pos);
      frames_.push_back(std::move(frame));
      Flow flow;
      try {
        flow = exec_list(stmt.body, out);
      } catch (...) {
        frames_.pop_back();
        throw;
      }
      frames_.pop_back();
      if (flow == Flow::kBreak) break;
    }
  }

  void exec_set(const Stmt& stmt) {
    Value value = eval(*stmt.expr);
    if (!stmt.target_attr.empty()) {
      Value object = lookup(stmt.targets[0]);
      if (!object.is_namespace()) {
        fail_at(stmt.pos, fmt::format("cannot set attribute '{}' of '{}': only namespace() objects can be changed",
                                      stmt.target_attr, stmt.targets[0]));
      }
      object.namespace_map().set(stmt.target_attr, std::move(value));
      return;
    }
    bind_targets(frames_.back(), stmt.targets, value, stmt.pos);
  }

  Value apply_filters(const std::vector<FilterCall>& filters, Value value) {
    for (const auto& filter : filters) {
      CallArgs args = eval_args(filter.args, filter.kwargs, filter.unpacked);
      try {
        value = apply_filter(filter.name, value, args);
      } catch (const TemplateRaised&) {
        throw;
      } catch (const EvalError& e) {
        fail_at(filter.pos, e.what());
      }
    }
    return value;
  }

  // ---- macros ----

  std::vector<ValueMap> captured_frames() const { return {frames_.begin() + 1, frames_.end()}; }

  Value make_macro(const Stmt& stmt) {
    return Value::function(stmt.targets[0], [this, &stmt, captured = captured_frames()](const CallArgs& args) {
      return call_macro(stmt.targets[0], stmt.params, stmt.body, captured, args);
    });
  }

  Value call_macro(const std::string& name, const KeywordExprs& params, const StmtList& body,
                   const std::vector<ValueMap>& captured, const CallArgs& args) {
    ValueMap frame;
    ValueList varargs;
    ValueMap kwargs;
    for (size_t i = 0; i < args.positional.size(); ++i) {
      if (i < params.size()) {
        frame.set(params[i].first, args.positional[i]);
      } else {
        varargs.push_back(args.positional[i]);
      }
    }
    for (const auto& [key, value] : args.keyword) {
      bool is_param = std::any_of(params.begin(), params.end(), [&](const auto& p) { return p.first == key; });
      if (is_param && frame.find(key)) throw EvalError(fmt::format("macro '{}' got multiple values for argument '{}'", name, key));
      if (is_param || key == "caller") {
        frame.set(key, value);
      } else {
        kwargs.set(key, value);
      }
    }
    frame.set("varargs", Value::tuple(std::move(varargs)));
    frame.set("kwargs", Value(std::move(kwargs)));
    return with_frames(captured, std::move(frame), [&] {
      // Defaults are evaluated at call time and may refer to earlier parameters.
      for (const auto& [param, default_expr] : params) {
        if (frames_.back().find(param)) continue;
        frames_.back().set(param, default_expr ? eval(*default_expr)
                                               : Value::undefined(fmt::format("missing argument '{}'", param)));
      }
      std::string out;
      exec_list(body, out);
      return Value(std::move(out));
    });
  }

  Value exec_call_block(const Stmt& stmt) {
    const Expr& call = *stmt.expr;
    Value callee = eval(*call.a);
    CallArgs args = eval_args(call.items, call.kwargs, call.unpacked);
    args.keyword.emplace_back(
        "caller", Value::function("caller", [this, &stmt, captured = captured_frames()](const CallArgs& caller_args) {
          return call_macro("caller", stmt.params, stmt.body, captured, caller_args);
        }));
    return call_function(callee, args, call.pos);
  }

  Value call_function(const Value& callee, const CallArgs& args, const SourcePos& pos) {
    try {
      if (callee.is_undefined()) fail_undefined(callee);
      if (callee.is_map() && !callee.is_namespace()) {
        if (const Value* call = callee.as_map().find(kCallKey)) return call->as_function().call(args);
      }
      if (!callee.is_function()) throw EvalError(fmt::format("'{}' object is not callable", callee.type_name()));
      return callee.as_function().call(args);
    } catch (const TemplateRaised& e) {
      fail("chat template raised an exception at line {}, column {}: {}", pos.line, pos.column, e.what());
    } catch (const EvalError& e) {
      fail_at(pos, e.what());
    }
  }

  // ---- expressions ----

  Value lookup(const std::string& name) const {
    for (auto frame = frames_.rbegin(); frame != frames_.rend(); ++frame) {
      if (const Value* found = frame->find(name)) return *found;
    }
    return Value::undefined(fmt::format("'{}' is undefined", name));
  }

  CallArgs eval_args(const std::vector<ExprPtr>& positional, const KeywordExprs& keyword, const Unpacked& unpacked) {
    CallArgs args;
    for (const auto& expr : positional) args.positional.push_back(eval(*expr));
    for (const auto& [name, expr] : keyword) args.keyword.emplace_back(name, eval(*expr));
    if (unpacked.args) {
      for (auto& item : iterate_value(eval(*unpacked.args))) args.positional.push_back(std::move(item));
    }
    if (unpacked.kwargs) {
      Value mapping = eval(*unpacked.kwargs);
      if (mapping.is_undefined()) fail_undefined(mapping);
      if (!mapping.is_map()) throw EvalError(fmt::format("argument after ** must be a mapping, not {}", mapping.type_name()));
      for (const auto& [key, value] : mapping.as_map().entries()) {
        if (!key.is_string()) throw EvalError("keywords must be strings");
        for (const auto& [name, unused] : args.keyword) {
          if (name == key.as_string()) throw EvalError(fmt::format("got multiple values for keyword argument '{}'", name));
        }
        args.keyword.emplace_back(key.as_string(), value);
      }
    }
    return args;
  }

  Value eval(const Expr& expr) {
    try {
      return eval_inner(expr);
    } catch (const TemplateRaised& e) {
      fail("chat template raised an exception at line {}, column {}: {}", expr.pos.line, expr.pos.column, e.what());
    } catch (const EvalError& e) {
      fail_at(expr.pos, e.what());
    }
  }

  bool compare(const std::string& op, const Value& left, const Value& right) {
    if (op == "==") return values_equal(left, right);
    if (op == "!=") return !values_equal(left, right);
    if (op == "in") return value_contains(right, left);
    if (op == "not in") return !value_contains(right, left);
    if (left.is_undefined()) fail_undefined(left);
    if (right.is_undefined()) fail_undefined(right);
    if (op == "<") return value_less(left, right);
    if (op == ">") return value_less(right, left);
    if (op == "<=") return !value_less(right, left);
    return !value_less(left, right);  // >=
  }

  Value eval_inner(const Expr& expr) {
    switch (expr.kind) {
      case Expr::Kind::kLiteral: return expr.literal;
      case Expr::Kind::kName: return lookup(expr.name);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        ValueList items;
        for (const auto& item : expr.items) items.push_back(eval(*item));
        return expr.kind == Expr::Kind::kTuple ? Value::tuple(std::move(items)) : Value(std::move(items));
      }
      case Expr::Kind::kDict: {
        ValueMap map;
        for (size_t i = 0; i + 1 < expr.items.size(); i += 2) {
          Value key = eval(*expr.items[i]);
          map.set(key, eval(*expr.items[i + 1]));
        }
        return Value(std::move(map));
      }
      case Expr::Kind::kUnary: {
        Value operand = eval(*expr.a);
        if (expr.name == "-") return unary_minus(operand);
        if (operand.is_undefined()) fail_undefined(operand);
        if (!operand.is_number() && !operand.is_bool()) {
          throw EvalError(fmt::format("bad operand type for unary +: '{}'", operand.type_name()));
        }
        return operand.is_bool() ? Value(int64_t{operand.as_bool()}) : operand;
      }
      case Expr::Kind::kBinary: return binary_operator(expr.name, eval(*expr.a), eval(*expr.b));
      case Expr::Kind::kCompare: {
        Value left = eval(*expr.a);
        for (size_t i = 0; i < expr.ops.size(); ++i) {
          Value right = eval(*expr.items[i]);
          if (!compare(expr.ops[i], left, right)) return Value(false);
          left = std::move(right);
        }
        return Value(true);
      }
      case Expr::Kind::kAnd: {
        Value left = eval(*expr.a);
        return left.truthy() ? eval(*expr.b) : left;
      }
      case Expr::Kind::kOr: {
        Value left = eval(*expr.a);
        return left.truthy() ? left : eval(*expr.b);
      }
      case Expr::Kind::kNot: return Value(!eval(*expr.a).truthy());
      case Expr::Kind::kConditional:
        if (eval(*expr.b).truthy()) return eval(*expr.a);
        return expr.c ? eval(*expr.c) : Value::undefined("the condition of an inline if without else was false");
      case Expr::Kind::kGetAttr: return get_attribute(eval(*expr.a), expr.name);
      case Expr::Kind::kGetItem: {
        Value object = eval(*expr.a);
        return get_item(object, eval(*expr.b));
      }
      case Expr::Kind::kSlice: {
        Value object = eval(*expr.a);
        Value parts[3];
        for (size_t i = 0; i < 3; ++i) {
          if (expr.items[i]) parts[i] = eval(*expr.items[i]);
        }
        return slice_value(object, parts[0], parts[1], parts[2]);
      }
      case Expr::Kind::kCall: {
        Value callee = eval(*expr.a);
        return call_function(callee, eval_args(expr.items, expr.kwargs, expr.unpacked), expr.pos);
      }
      case Expr::Kind::kFilter: {
        Value input = eval(*expr.a);
        return apply_filter(expr.filter.name, input, eval_args(expr.filter.args, expr.filter.kwargs, expr.filter.unpacked));
      }
      case Expr::Kind::kTest: {
        Value subject = eval(*expr.a);
        bool result = apply_test(expr.name, subject, eval_args(expr.items, expr.kwargs, expr.unpacked));
        return Value(result != expr.negated);
      }
    }
    return Value::undefined();
  }

  RenderLimits limits_;
  std::vector<ValueMap> frames_;  // frames_[0] holds the globals; each loop, macro call and with-block adds one
  int call_depth_ = 0;
  size_t iterations_ = 0;
};

}  // namespace

Template::Template(std::string_view source, TemplateOptions options)
    : body_(std::make_shared<const StmtList>(parse_template(tokenize_template(source, options)))) {}

std::string Template::render(const ValueMap& variables, const RenderLimits& limits) const {
  return Interpreter(variables, limits).render(*body_);
}

}  // namespace tern::chat
