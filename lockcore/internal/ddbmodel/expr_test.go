package ddbmodel

import (
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

func s(v string) AV { return &types.AttributeValueMemberS{Value: v} }
func n(v string) AV { return &types.AttributeValueMemberN{Value: v} }
func m(kv ...any) AV {
	out := map[string]AV{}
	for i := 0; i < len(kv); i += 2 {
		out[kv[i].(string)] = kv[i+1].(AV)
	}
	return &types.AttributeValueMemberM{Value: out}
}

// testItem is the item the condition cases evaluate against.
var testItem = Item{
	"pk":  s("a"),
	"sk":  s("x#1"),
	"n":   n("10"),
	"w#1": n("3"),
	"s":   s("hello"),
	"f":   &types.AttributeValueMemberBOOL{Value: true},
	"ss":  &types.AttributeValueMemberSS{Value: []string{"a", "b"}},
	"ns":  &types.AttributeValueMemberNS{Value: []string{"1", "2.5"}},
	"l":   &types.AttributeValueMemberL{Value: []AV{s("a"), n("1")}},
	"mp":  m("k", n("1"), "x#y", s("v"), "in", m("deep", s("d"))),
	"nul": &types.AttributeValueMemberNULL{Value: true},
	"u":   s("é😀"),
}

var testNames = map[string]string{"#n": "n", "#w": "w#1", "#s": "s", "#f": "f", "#ss": "ss", "#ns": "ns",
	"#l": "l", "#mp": "mp", "#k": "k", "#xy": "x#y", "#in": "in", "#deep": "deep", "#no": "missing", "#nul": "nul", "#u": "u"}

var testValues = map[string]AV{":10": n("10"), ":1e1": n("1e1"), ":3": n("3"), ":9": n("9"), ":11": n("11"),
	":hello": s("hello"), ":he": s("he"), ":x": s("x"), ":a": s("a"), ":true": &types.AttributeValueMemberBOOL{Value: true},
	":S": s("S"), ":N": s("N"), ":SS": s("SS"), ":M": s("M"), ":2p50": n("2.50"), ":v": s("v"), ":big": n("99999999999999999999999999999999999999"),
	":small": n("-1e-130"), ":0": n("0"), ":2": n("2"), ":5": n("5"), ":BOOL": s("BOOL"), ":NULL": s("NULL"), ":bogus": s("X")}

func TestConditions(t *testing.T) {
	cases := []struct {
		expr string
		want bool
		err  string // a substring of the ValidationException, when the expression is refused
	}{
		// comparisons: numbers by value, strings by bytes, mixed types never ordered
		{"#n = :10", true, ""},
		{"#n = :1e1", true, ""},
		{"#n <> :10", false, ""},
		{"#n < :11", true, ""},
		{"#n <= :10", true, ""},
		{"#n > :9", true, ""},
		{"#n >= :11", false, ""},
		{"#w = :3", true, ""},
		{"#s > :he", true, ""},
		{"#s = :10", false, ""},
		{"#s <> :10", true, ""},
		{"#s < :10", false, ""},
		{"#n < :big", true, ""},
		{"#n > :small", true, ""},
		// a missing attribute: = and ordering false, <> true
		{"#no = :10", false, ""},
		{"#no <> :10", true, ""},
		{"#no < :10", false, ""},
		{"#f = :true", true, ""},
		// document paths
		{"#mp.#k = :1e1", false, ""},
		{"#mp.#xy = :v", true, ""},
		{"#mp.#in.#deep = :he", false, ""},
		{"attribute_exists (#mp.#in.#deep)", true, ""},
		{"attribute_exists (#mp.#no)", false, ""},
		{"attribute_exists (#l[1])", true, ""},
		{"attribute_exists (#l[2])", false, ""},
		{"#l[0] = :a", true, ""},
		// functions
		{"attribute_exists (#n)", true, ""},
		{"attribute_not_exists (#n)", false, ""},
		{"attribute_not_exists (#no)", true, ""},
		{"attribute_type (#n, :N)", true, ""},
		{"attribute_type (#ss, :SS)", true, ""},
		{"attribute_type (#mp, :M)", true, ""},
		{"attribute_type (#f, :BOOL)", true, ""},
		{"attribute_type (#nul, :NULL)", true, ""},
		{"attribute_type (#n, :S)", false, ""},
		{"attribute_type (#n, :bogus)", false, "Invalid type"},
		{"begins_with (#s, :he)", true, ""},
		{"begins_with (#n, :he)", false, ""},
		{"begins_with (#s, :10)", false, "operand type: N"},
		{"contains (#s, :he)", true, ""},
		{"contains (#ss, :a)", true, ""},
		{"contains (#ss, :x)", false, ""},
		{"contains (#ns, :2p50)", true, ""},
		{"contains (#l, :a)", true, ""},
		{"size (#s) = :5", true, ""},
		{"size (#u) = :3", true, ""}, // UTF-16 code units: é, and 😀 as a surrogate pair
		{"size (#ss) = :2", true, ""},
		{"size (#mp) > :2", true, ""},
		{"size (#n) > :0", false, ""},
		{"size (#no) > :0", false, ""},
		// BETWEEN and IN
		{"#n BETWEEN :9 AND :11", true, ""},
		{"#n BETWEEN :10 AND :10", true, ""},
		{"#n BETWEEN :11 AND :3", false, "upper bound to be greater than or equal to lower bound"},
		{"#n BETWEEN :9 AND :x", false, "same data type for lower and upper bounds"},
		{"#n IN (:3, :1e1)", true, ""},
		{"#n IN (:3, :9)", false, ""},
		// boolean structure and precedence: NOT binds tighter than AND, AND than OR
		{"(#n = :10) AND (#s = :hello)", true, ""},
		{"(#n = :10) AND (#s = :x)", false, ""},
		{"(#n = :9) OR (#s = :hello)", true, ""},
		{"NOT (#n = :9)", true, ""},
		{"NOT #n = :10 OR #s = :hello", true, ""},
		{"#n = :9 OR #s = :hello AND #n = :9", false, ""},
		{"#n = :9 or #s = :hello", true, ""},
		{"((attribute_not_exists (#no)) AND ((#w = :3) OR (#n = :9))) AND (NOT (#f = :true))", false, ""},
		// bare names
		{"n = :10", true, ""},
		// static refusals
		{"#n < :true", false, "operand type: BOOL"},
		{"#n > #n", false, "first operand must be distinct"},
		{"#n = :undefined", false, "not defined"},
		{"#undefined = :10", false, "not defined"},
		{"#n = ", false, "Syntax error"},
		{"#n = :10 AND", false, "Syntax error"},
		{"", false, "can not be empty"},
	}
	for _, c := range cases {
		ctx := newExprContext(testNames, testValues)
		cnd, err := parse(ctx, "ConditionExpression", c.expr, (*parser).condition)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%q: error %v, want one containing %q", c.expr, err, c.err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", c.expr, err)
			continue
		}
		if got := evalCond(testItem, cnd); got != c.want {
			t.Errorf("%q = %v, want %v", c.expr, got, c.want)
		}
	}
}

// TestBuilderForms parses what the SDK's expression builder emits.
func TestBuilderForms(t *testing.T) {
	names := map[string]string{"#0": "pk", "#1": "w#abc", "#2": "fence", "#3": "waiters", "#4": "w1"}
	values := map[string]AV{":0": s("a"), ":1": n("1"), ":2": n("0")}
	for _, src := range []string{
		"(attribute_not_exists (#0)) OR (#1 = :0)",
		"((#2 <= :1) AND (attribute_exists (#3.#4))) OR (NOT (begins_with (#0, :0)))",
		"#0 BETWEEN :0 AND :0",
		"#0 IN (:0, :0)",
		"size (#1) > :1",
	} {
		ctx := newExprContext(names, values)
		if _, err := parse(ctx, "ConditionExpression", src, (*parser).condition); err != nil {
			t.Errorf("condition %q: %v", src, err)
		}
	}
	values[":ss"] = &types.AttributeValueMemberSS{Value: []string{"a"}}
	values[":l"] = &types.AttributeValueMemberL{}
	for _, src := range []string{
		"ADD #0 :1\nREMOVE #1, #3.#4\nSET #2 = if_not_exists(#2, :1) + :2, #1 = :0\n",
		"DELETE #0 :ss\n",
		"SET #0 = list_append(#1, :l), #2 = #2 - :1\n",
	} {
		ctx := newExprContext(names, values)
		if _, err := parse(ctx, "UpdateExpression", src, (*parser).update); err != nil {
			t.Errorf("update %q: %v", src, err)
		}
	}
}

func TestUpdates(t *testing.T) {
	key := Item{"pk": s("a"), "sk": s("x#1")}
	cases := []struct {
		name string
		old  Item // nil: no item
		expr string
		want string // the new item rendered, or an error substring prefixed by "!"
	}{
		{"set", Item{"n": n("1")}, "SET #n = :10", `n=N10`},
		{"set keeps others", Item{"n": n("1"), "s": s("x")}, "SET #n = :10", `n=N10 s=Sx`},
		{"set from old values", Item{"n": n("1"), "w#1": n("5")}, "SET #n = #w, #w = #n", `n=N5 w#1=N1`},
		{"if_not_exists absent", nil, "SET #n = if_not_exists(#n, :3) + :10", `n=N13`},
		{"if_not_exists present", Item{"n": n("1")}, "SET #n = if_not_exists(#n, :3) + :10", `n=N11`},
		{"minus", Item{"n": n("1")}, "SET #n = #n - :2p50", `n=N-1.5`},
		{"plus missing", nil, "SET #n = #no + :10", "!refers to an attribute that does not exist"},
		{"plus string", Item{"s": s("x")}, "SET #n = #s + :10", "!incorrect data type"},
		{"add number", Item{"n": n("1")}, "ADD #n :10", `n=N11`},
		{"add absent", nil, "ADD #n :10", `n=N10`},
		{"add to string", Item{"n": s("x")}, "ADD #n :10", "!incorrect data type"},
		{"add overflow", Item{"n": n("99999999999999999999999999999999999999")}, "ADD #n :3", "!38 digits"},
		{"add set", Item{"ss": &types.AttributeValueMemberSS{Value: []string{"a"}}}, "ADD #ss :set", `ss=SS[a b]`},
		{"delete set", Item{"ss": &types.AttributeValueMemberSS{Value: []string{"a", "b"}}}, "DELETE #ss :set", ``},
		{"remove", Item{"n": n("1"), "s": s("x")}, "REMOVE #n", `s=Sx`},
		{"remove absent", nil, "REMOVE #n", ``},
		{"set nested", Item{"mp": m()}, "SET #mp.#k = :10", `mp=M{k=N10}`},
		{"set nested no parent", nil, "SET #mp.#k = :10", "!document path provided in the update expression is invalid"},
		{"remove nested no parent", nil, "REMOVE #mp.#k", "!document path provided in the update expression is invalid"},
		{"delete under a list by name", Item{"mp": &types.AttributeValueMemberL{Value: []AV{s("a")}}}, "DELETE #mp.#k :set", "!document path provided in the update expression is invalid"},
		{"delete nested absent", Item{"mp": m()}, "DELETE #mp.#k :set", `mp=M{}`},
		{"remove nested", Item{"mp": m("k", n("1"), "x#y", s("v"))}, "REMOVE #mp.#k", `mp=M{x#y=Sv}`},
		{"list append", Item{"l": &types.AttributeValueMemberL{Value: []AV{s("a")}}}, "SET #l = list_append(#l, :list)", `l=L[Sa Sb]`},
		{"list index past end", Item{"l": &types.AttributeValueMemberL{Value: []AV{s("a")}}}, "SET #l[5] = :x", `l=L[Sa Sx]`},
		{"remove list indexes", Item{"l": &types.AttributeValueMemberL{Value: []AV{s("a"), s("b"), s("c")}}}, "REMOVE #l[0], #l[2]", `l=L[Sb]`},
	}
	values := map[string]AV{}
	for k, v := range testValues {
		values[k] = v
	}
	values[":set"] = &types.AttributeValueMemberSS{Value: []string{"b", "a"}}
	values[":list"] = &types.AttributeValueMemberL{Value: []AV{s("b")}}
	for _, c := range cases {
		ctx := newExprContext(testNames, values)
		u, err := parse(ctx, "UpdateExpression", c.expr, (*parser).update)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		var old Item
		if c.old != nil {
			old = cloneItem(key)
			for k, v := range c.old {
				old[k] = v
			}
		}
		got, err := applyUpdate(old, key, &u)
		if strings.HasPrefix(c.want, "!") {
			if err == nil || !strings.Contains(err.Error(), c.want[1:]) {
				t.Errorf("%s: error %v, want one containing %q", c.name, err, c.want[1:])
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		delete(got, "pk")
		delete(got, "sk")
		if r := renderTest(got); r != c.want {
			t.Errorf("%s: got %s, want %s", c.name, r, c.want)
		}
	}
}

func TestUpdateStatic(t *testing.T) {
	for _, c := range []struct{ expr, err string }{
		{"SET #mp.#k = :10 REMOVE #mp", "overlap"},
		{"SET #n = :10, #n = :3", "overlap"},
		{"SET #n = :10 SET #s = :x", "only be used once"},
		{"ADD #n :x", "operator: ADD, operand type: STRING"},
		{"DELETE #n :10", "operator: DELETE"},
		{"SET #n = #n + :x", "operand type: S"},
	} {
		ctx := newExprContext(testNames, testValues)
		u, err := parse(ctx, "UpdateExpression", c.expr, (*parser).update)
		if err == nil {
			if msg := checkUpdate(&u); msg != "" {
				err = &exprError{msg}
			}
		}
		if err == nil || !strings.Contains(err.Error(), c.err) {
			t.Errorf("%q: error %v, want one containing %q", c.expr, err, c.err)
		}
	}
}

func renderTest(it Item) string {
	var parts []string
	for _, k := range sortedNames(it) {
		parts = append(parts, k+"="+renderValue(it[k]))
	}
	return strings.Join(parts, " ")
}

func renderValue(v AV) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return "S" + v.Value
	case *types.AttributeValueMemberN:
		return "N" + v.Value
	case *types.AttributeValueMemberSS:
		return "SS[" + strings.Join(v.Value, " ") + "]"
	case *types.AttributeValueMemberL:
		var parts []string
		for _, e := range v.Value {
			parts = append(parts, renderValue(e))
		}
		return "L[" + strings.Join(parts, " ") + "]"
	case *types.AttributeValueMemberM:
		return "M{" + renderTest(v.Value) + "}"
	}
	return typeOf(v)
}

func TestNumbers(t *testing.T) {
	for _, c := range []struct{ in, canon, err string }{
		{"1.50", "1.5", ""}, {"007", "7", ""}, {"1e2", "100", ""}, {"-0", "0", ""}, {"0.0", "0", ""},
		{"1E+2", "100", ""}, {"0.000100", "0.0001", ""}, {"+5", "5", ""}, {".5", "0.5", ""}, {"5.", "5", ""},
		{"-1.5E-3", "-0.0015", ""}, {"100000000000000000000000000000000000000000", "100000000000000000000000000000000000000000", ""},
		{"123456789012345678901234567890123456789", "", "precision up to 38 digits"},
		{"1e126", "", "Number overflow"}, {"1e-131", "", "Number underflow"},
		{" 1", "", "cannot be converted"}, {"0x10", "", "cannot be converted"}, {"", "", "cannot be converted"}, {"1e", "", "cannot be converted"},
	} {
		msg := checkValue(n(c.in))
		if c.err != "" {
			if !strings.Contains(msg, c.err) {
				t.Errorf("%q: %q, want %q", c.in, msg, c.err)
			}
			continue
		}
		if msg != "" {
			t.Errorf("%q: %s", c.in, msg)
			continue
		}
		if got, _ := CanonicalNumber(c.in); got != c.canon {
			t.Errorf("%q: canonical %q, want %q", c.in, got, c.canon)
		}
	}
	// Sizes as DynamoDB Local charges them (measured at the 400 KB limit).
	for in, want := range map[string]int{"0": 1, "1": 2, "12": 2, "123": 3, "-1": 3, "1.5": 3, "0.01": 2, "100": 2,
		"1000": 2, "-12.5": 4, "12345678901234567890123456789012345678": 20, "1e-130": 2} {
		if got := numberSize(mustNumber(in)); got != want {
			t.Errorf("size of %s = %d, want %d", in, got, want)
		}
	}
}
