package ddbmodel

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Expressions: a tokenizer and a recursive-descent parser for DynamoDB's condition,
// update, key-condition and projection expressions. They cover the whole grammar the
// SDK's expression builder emits (and DynamoDB's own spelling of it: keywords in any
// case, bare attribute names, free spacing).

type tokKind int

const (
	tEOF    tokKind = iota
	tIdent          // bare word: a keyword, a function name or an attribute name
	tName           // #placeholder
	tValue          // :placeholder
	tNumber         // list index
	tPunct          // ( ) [ ] , . = <> < <= > >= + -
)

type token struct {
	kind tokKind
	text string
	pos  int
}

func isWordByte(c byte) bool {
	return c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

// tokenize splits s into tokens; msg is DynamoDB's complaint about a character it
// cannot read ("" when none).
func tokenize(s string) (toks []token, msg string) {
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#' || c == ':':
			j := i + 1
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Sprintf("Syntax error; token: %q, near: %q", string(c), near(s, i))
			}
			k := tName
			if c == ':' {
				k = tValue
			}
			toks = append(toks, token{k, s[i:j], i})
			i = j
		case c >= '0' && c <= '9':
			j := i
			for j < len(s) && s[j] >= '0' && s[j] <= '9' {
				j++
			}
			toks = append(toks, token{tNumber, s[i:j], i})
			i = j
		case isWordByte(c):
			j := i
			for j < len(s) && isWordByte(s[j]) {
				j++
			}
			toks = append(toks, token{tIdent, s[i:j], i})
			i = j
		case c == '<' && i+1 < len(s) && (s[i+1] == '>' || s[i+1] == '='):
			toks = append(toks, token{tPunct, s[i : i+2], i})
			i += 2
		case c == '>' && i+1 < len(s) && s[i+1] == '=':
			toks = append(toks, token{tPunct, s[i : i+2], i})
			i += 2
		case strings.IndexByte("()[],.=<>+-", c) >= 0:
			toks = append(toks, token{tPunct, s[i : i+1], i})
			i++
		default:
			return nil, fmt.Sprintf("Invalid character encountered; character: %q, near: %q", string(c), near(s, i))
		}
	}
	return append(toks, token{tEOF, "", len(s)}), ""
}

func near(s string, i int) string {
	return s[i:min(len(s), i+10)]
}

// pathElem is one step of a document path: a map key (or top-level name) or a list
// index.
type pathElem struct {
	name    string
	index   int
	isIndex bool
}

type docPath []pathElem

func (p docPath) String() string {
	var b strings.Builder
	b.WriteByte('[')
	for i, e := range p {
		if i > 0 {
			b.WriteString(", ")
		}
		if e.isIndex {
			fmt.Fprintf(&b, "[%d]", e.index)
		} else {
			b.WriteString(e.name)
		}
	}
	b.WriteByte(']')
	return b.String()
}

// operand is a value in an expression.
type operand interface{ isOperand() }

type (
	opPath  struct{ path docPath }
	opValue struct {
		v    AV
		name string
	}
	opSize        struct{ path docPath }
	opIfNotExists struct {
		path docPath
		def  operand
	}
	opListAppend struct{ a, b operand }
	opArith      struct {
		op   string // "+" or "-"
		a, b operand
	}
)

func (opPath) isOperand()        {}
func (opValue) isOperand()       {}
func (opSize) isOperand()        {}
func (opIfNotExists) isOperand() {}
func (opListAppend) isOperand()  {}
func (opArith) isOperand()       {}

// cond is a condition.
type cond interface{ isCond() }

type (
	condCmp struct {
		op   string
		a, b operand
	}
	condBetween struct{ a, lo, hi operand }
	condIn      struct {
		a    operand
		list []operand
	}
	condFunc struct {
		name string
		args []operand
	}
	condAnd struct{ a, b cond }
	condOr  struct{ a, b cond }
	condNot struct{ a cond }
)

func (condCmp) isCond()     {}
func (condBetween) isCond() {}
func (condIn) isCond()      {}
func (condFunc) isCond()    {}
func (condAnd) isCond()     {}
func (condOr) isCond()      {}
func (condNot) isCond()     {}

// updateExpr is a parsed update expression.
type updateExpr struct {
	set    []setAction
	remove []docPath
	add    []pathValue
	delete []pathValue
}

type setAction struct {
	path docPath
	val  operand
}

type pathValue struct {
	path docPath
	val  opValue
}

// exprContext resolves placeholders and records which ones the request's expressions
// used: DynamoDB refuses names and values that no expression uses.
type exprContext struct {
	names      map[string]string
	values     map[string]AV
	usedNames  map[string]bool
	usedValues map[string]bool
}

func newExprContext(names map[string]string, values map[string]AV) *exprContext {
	return &exprContext{names: names, values: values, usedNames: map[string]bool{}, usedValues: map[string]bool{}}
}

// checkUnused returns the ValidationException message for names or values no expression
// used ("" when all were used).
func (c *exprContext) checkUnused() string {
	var unusedN, unusedV []string
	for k := range c.names {
		if !c.usedNames[k] {
			unusedN = append(unusedN, k)
		}
	}
	for k := range c.values {
		if !c.usedValues[k] {
			unusedV = append(unusedV, k)
		}
	}
	if len(unusedN) > 0 {
		return fmt.Sprintf("Value provided in ExpressionAttributeNames unused in expressions: keys: {%s}", strings.Join(unusedN, ", "))
	}
	if len(unusedV) > 0 {
		return fmt.Sprintf("Value provided in ExpressionAttributeValues unused in expressions: keys: {%s}", strings.Join(unusedV, ", "))
	}
	return ""
}

type parser struct {
	ctx  *exprContext
	kind string // "ConditionExpression", … for messages
	src  string
	toks []token
	i    int
}

// exprError is a ValidationException raised while parsing or checking an expression.
type exprError struct{ msg string }

func (e *exprError) Error() string { return e.msg }

func (p *parser) fail(format string, args ...any) {
	panic(&exprError{fmt.Sprintf("Invalid %s: %s", p.kind, fmt.Sprintf(format, args...))})
}

func (p *parser) peek() token { return p.toks[p.i] }
func (p *parser) next() token {
	t := p.toks[p.i]
	if t.kind != tEOF {
		p.i++
	}
	return t
}

func (p *parser) syntax(t token) {
	if t.kind == tEOF {
		p.fail("Syntax error; token: \"<EOF>\", near: %q", near(p.src, max(0, len(p.src)-10)))
	}
	p.fail("Syntax error; token: %q, near: %q", t.text, near(p.src, t.pos))
}

func (p *parser) isPunct(s string) bool {
	t := p.peek()
	return t.kind == tPunct && t.text == s
}

func (p *parser) expectPunct(s string) {
	t := p.next()
	if t.kind != tPunct || t.text != s {
		p.syntax(t)
	}
}

func (p *parser) isKeyword(kw string) bool {
	t := p.peek()
	return t.kind == tIdent && strings.EqualFold(t.text, kw)
}

// parse runs f over src and turns a panic with an *exprError into an error.
func parse[T any](ctx *exprContext, kind, src string, f func(p *parser) T) (out T, err error) {
	toks, msg := tokenize(src)
	if msg != "" {
		return out, &exprError{fmt.Sprintf("Invalid %s: %s", kind, msg)}
	}
	p := &parser{ctx: ctx, kind: kind, src: src, toks: toks}
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*exprError)
			if !ok {
				panic(r)
			}
			err = e
		}
	}()
	if p.peek().kind == tEOF {
		p.fail("The expression can not be empty;")
	}
	out = f(p)
	if t := p.peek(); t.kind != tEOF {
		p.syntax(t)
	}
	return out, nil
}

// reserved words that the parser itself treats specially; DynamoDB reserves hundreds
// more, which the builder never emits bare.
var keywords = map[string]bool{"AND": true, "OR": true, "NOT": true, "BETWEEN": true, "IN": true,
	"SET": true, "REMOVE": true, "ADD": true, "DELETE": true}

func (p *parser) pathElemName() string {
	t := p.next()
	switch t.kind {
	case tName:
		n, ok := p.ctx.names[t.text]
		if !ok {
			p.fail("An expression attribute name used in the document path is not defined; attribute name: %s", t.text)
		}
		p.ctx.usedNames[t.text] = true
		return n
	case tIdent:
		if keywords[strings.ToUpper(t.text)] {
			p.fail("Attribute name is a reserved keyword; reserved keyword: %s", t.text)
		}
		if t.text[0] >= '0' && t.text[0] <= '9' {
			p.syntax(t)
		}
		return t.text
	}
	p.syntax(t)
	return ""
}

func (p *parser) path() docPath {
	path := docPath{{name: p.pathElemName()}}
	for {
		switch {
		case p.isPunct("."):
			p.next()
			path = append(path, pathElem{name: p.pathElemName()})
		case p.isPunct("["):
			p.next()
			t := p.next()
			if t.kind != tNumber {
				p.syntax(t)
			}
			n, err := strconv.Atoi(t.text)
			if err != nil {
				p.syntax(t)
			}
			p.expectPunct("]")
			path = append(path, pathElem{index: n, isIndex: true})
		default:
			return path
		}
	}
}

func (p *parser) value() opValue {
	t := p.next()
	if t.kind != tValue {
		p.syntax(t)
	}
	v, ok := p.ctx.values[t.text]
	if !ok {
		p.fail("An expression attribute value used in expression is not defined; attribute value: %s", t.text)
	}
	p.ctx.usedValues[t.text] = true
	return opValue{v: v, name: t.text}
}

// isFunc reports whether the next tokens are name '(' (a function call).
func (p *parser) isFunc(name string) bool {
	t := p.peek()
	if t.kind != tIdent || t.text != name {
		return false
	}
	n := p.toks[p.i+1]
	return n.kind == tPunct && n.text == "("
}

// condOperand parses an operand of a condition: a path, a value or size(path).
func (p *parser) condOperand() operand {
	t := p.peek()
	switch {
	case t.kind == tValue:
		return p.value()
	case p.isFunc("size"):
		p.next()
		p.expectPunct("(")
		if p.peek().kind == tValue {
			p.fail("Incorrect operand type for operator or function; operator or function: size, operand type: %s", typeName(typeOf(p.value().v)))
		}
		path := p.path()
		p.expectPunct(")")
		return opSize{path}
	case t.kind == tIdent:
		if isFunctionName(t.text) {
			n := p.toks[p.i+1]
			if n.kind == tPunct && n.text == "(" {
				p.fail("The function is not allowed to be used this way in an expression; function: %s", t.text)
			}
		}
		return opPath{p.path()}
	case t.kind == tName:
		return opPath{p.path()}
	}
	p.syntax(t)
	return nil
}

func isFunctionName(s string) bool {
	switch s {
	case "attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains", "size", "if_not_exists", "list_append":
		return true
	}
	return false
}

func (p *parser) condition() cond {
	c := p.and()
	for p.isKeyword("OR") {
		p.next()
		c = condOr{c, p.and()}
	}
	return c
}

func (p *parser) and() cond {
	c := p.not()
	for p.isKeyword("AND") {
		p.next()
		c = condAnd{c, p.not()}
	}
	return c
}

func (p *parser) not() cond {
	if p.isKeyword("NOT") {
		p.next()
		return condNot{p.not()}
	}
	return p.primary()
}

func (p *parser) primary() cond {
	if p.isPunct("(") {
		p.next()
		c := p.condition()
		p.expectPunct(")")
		return c
	}
	for _, fn := range []string{"attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains"} {
		if p.isFunc(fn) {
			return p.function(fn)
		}
	}
	a := p.condOperand()
	t := p.peek()
	switch {
	case t.kind == tPunct && (t.text == "=" || t.text == "<>" || t.text == "<" || t.text == "<=" || t.text == ">" || t.text == ">="):
		p.next()
		b := p.condOperand()
		p.distinct(t.text, a, b)
		if t.text != "=" && t.text != "<>" {
			p.orderedOperand(t.text, a)
			p.orderedOperand(t.text, b)
		}
		return condCmp{t.text, a, b}
	case p.isKeyword("BETWEEN"):
		p.next()
		lo := p.condOperand()
		if !p.isKeyword("AND") {
			p.syntax(p.peek())
		}
		p.next()
		hi := p.condOperand()
		p.distinct("BETWEEN", a, lo, hi)
		for _, o := range []operand{a, lo, hi} {
			p.orderedOperand("BETWEEN", o)
		}
		if lv, ok := lo.(opValue); ok {
			if hv, ok := hi.(opValue); ok {
				if typeOf(lv.v) != typeOf(hv.v) {
					p.fail("The BETWEEN operator requires same data type for lower and upper bounds; lower bound operand: AttributeValue: {%s:%s}, upper bound operand: AttributeValue: {%s:%s}", typeOf(lv.v), avString(lv.v), typeOf(hv.v), avString(hv.v))
				}
				if c, ok := compare(lv.v, hv.v); ok && c > 0 {
					p.fail("The BETWEEN operator requires upper bound to be greater than or equal to lower bound; lower operand: %s, upper operand: %s", avString(lv.v), avString(hv.v))
				}
			}
		}
		return condBetween{a, lo, hi}
	case p.isKeyword("IN"):
		p.next()
		p.expectPunct("(")
		list := []operand{p.condOperand()}
		for p.isPunct(",") {
			p.next()
			list = append(list, p.condOperand())
		}
		p.expectPunct(")")
		p.distinct("IN", append([]operand{a}, list...)...)
		if len(list) > 100 {
			p.fail("The IN operator is provided with too many operands; number of operands: %d", len(list))
		}
		return condIn{a, list}
	}
	p.syntax(t)
	return nil
}

// sameOperand reports whether two operands are the same path or the same value
// placeholder.
func sameOperand(a, b operand) bool {
	switch a := a.(type) {
	case opPath:
		b, ok := b.(opPath)
		return ok && slices.Equal(a.path, b.path)
	case opValue:
		b, ok := b.(opValue)
		return ok && a.name == b.name
	}
	return false
}

// distinct refuses an operator whose first operand reappears among the others.
func (p *parser) distinct(op string, ops ...operand) {
	for _, o := range ops[1:] {
		if sameOperand(ops[0], o) {
			p.fail("The first operand must be distinct from the remaining operands for this operator or function; operator: %s, first operand: %s", op, operandString(ops[0]))
		}
	}
}

func operandString(o operand) string {
	switch o := o.(type) {
	case opPath:
		return o.path.String()
	case opValue:
		return o.name
	}
	return fmt.Sprintf("%T", o)
}

// orderedOperand refuses a literal operand of an ordering comparison that is not a
// string, number or binary (a path's type is only known when evaluating).
func (p *parser) orderedOperand(op string, o operand) {
	if v, ok := o.(opValue); ok {
		switch typeOf(v.v) {
		case tS, tN, tB:
		default:
			p.fail("Incorrect operand type for operator or function; operator or function: %s, operand type: %s", op, typeName(typeOf(v.v)))
		}
	}
}

func (p *parser) function(fn string) cond {
	p.next()
	p.expectPunct("(")
	var args []operand
	if !p.isPunct(")") {
		args = append(args, p.condOperand())
		for p.isPunct(",") {
			p.next()
			args = append(args, p.condOperand())
		}
	}
	p.expectPunct(")")
	want := 2
	if fn == "attribute_exists" || fn == "attribute_not_exists" {
		want = 1
	}
	if len(args) != want {
		p.fail("Incorrect number of operands for operator or function; operator or function: %s, number of operands: %d", fn, len(args))
	}
	if _, ok := args[0].(opPath); !ok {
		p.fail("Operator or function requires a document path; operator or function: %s", fn)
	}
	if fn == "begins_with" || fn == "contains" {
		p.distinct(fn, args...)
	}
	switch fn {
	case "attribute_type":
		v, ok := args[1].(opValue)
		if !ok {
			p.fail("Incorrect operand type for operator or function; operator or function: attribute_type, operand type: path")
		}
		if typeOf(v.v) != tS {
			p.fail("Incorrect operand type for operator or function; operator or function: attribute_type, operand type: %s", typeName(typeOf(v.v)))
		}
		if !validTypes[avString(v.v)] {
			p.fail("Invalid type: %s", avString(v.v))
		}
	case "begins_with":
		if v, ok := args[1].(opValue); ok {
			if t := typeOf(v.v); t != tS && t != tB {
				p.fail("Incorrect operand type for operator or function; operator or function: begins_with, operand type: %s", typeName(t))
			}
		}
	}
	return condFunc{fn, args}
}

// update expressions -------------------------------------------------------------

func (p *parser) update() updateExpr {
	var u updateExpr
	seen := map[string]bool{}
	for p.peek().kind != tEOF {
		t := p.next()
		if t.kind != tIdent {
			p.syntax(t)
		}
		kw := strings.ToUpper(t.text)
		switch kw {
		case "SET", "REMOVE", "ADD", "DELETE":
		default:
			p.syntax(t)
		}
		if seen[kw] {
			p.fail("The \"%s\" section can only be used once in an update expression;", kw)
		}
		seen[kw] = true
		for {
			switch kw {
			case "SET":
				path := p.path()
				p.expectPunct("=")
				u.set = append(u.set, setAction{path, p.setValue()})
			case "REMOVE":
				u.remove = append(u.remove, p.path())
			case "ADD", "DELETE":
				path := p.path()
				v := p.value()
				t := typeOf(v.v)
				if kw == "ADD" && t != tN && t != tSS && t != tNS && t != tBS ||
					kw == "DELETE" && t != tSS && t != tNS && t != tBS {
					p.fail("Incorrect operand type for operator or function; operator: %s, operand type: %s", kw, avTypeWord(t))
				}
				if kw == "ADD" {
					u.add = append(u.add, pathValue{path, v})
				} else {
					u.delete = append(u.delete, pathValue{path, v})
				}
			}
			if !p.isPunct(",") {
				break
			}
			p.next()
		}
	}
	return u
}

// avTypeWord is the word DynamoDB's ADD/DELETE messages use for a type.
func avTypeWord(t string) string {
	switch t {
	case tS:
		return "STRING"
	case tN:
		return "NUMBER"
	case tB:
		return "BINARY"
	case tM:
		return "MAP"
	case tL:
		return "LIST"
	case tBOOL:
		return "BOOLEAN"
	case tNULL:
		return "NULL"
	}
	return t
}

// setValue parses the right-hand side of a SET action: operand [('+'|'-') operand].
func (p *parser) setValue() operand {
	a := p.setOperand()
	if p.isPunct("+") || p.isPunct("-") {
		op := p.next().text
		b := p.setOperand()
		for _, o := range []operand{a, b} {
			if v, ok := o.(opValue); ok && typeOf(v.v) != tN {
				p.fail("Incorrect operand type for operator or function; operator or function: %s, operand type: %s", op, typeName(typeOf(v.v)))
			}
		}
		return opArith{op, a, b}
	}
	return a
}

func (p *parser) setOperand() operand {
	t := p.peek()
	switch {
	case t.kind == tValue:
		return p.value()
	case p.isFunc("if_not_exists"):
		p.next()
		p.expectPunct("(")
		if p.peek().kind == tValue {
			p.fail("Operator or function requires a document path; operator or function: if_not_exists")
		}
		path := p.path()
		p.expectPunct(",")
		def := p.setOperand()
		p.expectPunct(")")
		return opIfNotExists{path, def}
	case p.isFunc("list_append"):
		p.next()
		p.expectPunct("(")
		a := p.setOperand()
		p.expectPunct(",")
		b := p.setOperand()
		p.expectPunct(")")
		for _, o := range []operand{a, b} {
			if v, ok := o.(opValue); ok && typeOf(v.v) != tL {
				p.fail("Incorrect operand type for operator or function; operator or function: list_append, operand type: %s", typeName(typeOf(v.v)))
			}
		}
		return opListAppend{a, b}
	case t.kind == tIdent && isFunctionName(t.text) && p.toks[p.i+1].kind == tPunct && p.toks[p.i+1].text == "(":
		p.fail("The function is not allowed in an update expression; function: %s", t.text)
	case t.kind == tIdent || t.kind == tName:
		return opPath{p.path()}
	}
	p.syntax(t)
	return nil
}

// projections -------------------------------------------------------------------

func (p *parser) projection() []docPath {
	paths := []docPath{p.path()}
	for p.isPunct(",") {
		p.next()
		paths = append(paths, p.path())
	}
	return paths
}

// avString renders a scalar for messages and type names.
func avString(v AV) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return v.Value
	case *types.AttributeValueMemberN:
		return v.Value
	}
	return fmt.Sprintf("%v", v)
}
