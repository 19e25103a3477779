package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/big"
	"sort"
	"strings"
)

// MatchPattern reports whether event matches an EventBridge event pattern, the language of
// EventBridge rules and of Lambda event filtering (FilterCriteria). pattern is a JSON string
// (as in FilterCriteria) or an already decoded mapping (as an EventBridge rule's Pattern in
// the template); event is a JSON document or a decoded value. For Lambda event source
// mappings, pass one record as Lambda sees it (for DynamoDB streams, the record with its
// "eventName", "userIdentity" and "dynamodb" keys).
//
// Supported: nested objects, lists of literal values (strings, numbers, booleans, null),
// and the operators prefix, suffix, equals-ignore-case, exists, anything-but (values or a
// prefix) and numeric. A field matches when any of its values (an event array is a set of
// values) matches any matcher of the list. Every field of the pattern must match.
func MatchPattern(pattern, event any) (bool, error) {
	p, err := decodeJSON(pattern)
	if err != nil {
		return false, fmt.Errorf("pattern: %w", err)
	}
	e, err := decodeJSON(event)
	if err != nil {
		return false, fmt.Errorf("event: %w", err)
	}
	pm, ok := p.(map[string]any)
	if !ok {
		return false, fmt.Errorf("pattern: top level is %T, want an object", p)
	}
	return matchObject(pm, e, "")
}

// decodeJSON turns JSON text into a value with json.Number numbers; decoded values have
// their numbers normalized the same way.
func decodeJSON(v any) (any, error) {
	var data []byte
	switch x := v.(type) {
	case string:
		data = []byte(x)
	case []byte:
		data = x
	case json.RawMessage:
		data = x
	default:
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		data = b
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil, err
	}
	return out, nil
}

func matchObject(pattern map[string]any, event any, path string) (bool, error) {
	obj, _ := event.(map[string]any)
	keys := make([]string, 0, len(pattern))
	for k := range pattern {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		field := path + "/" + k
		val, present := obj[k]
		var ok bool
		var err error
		switch p := pattern[k].(type) {
		case map[string]any:
			// An absent object matches only a nested pattern of {"exists": false} fields.
			ok, err = matchObject(p, val, field)
		case []any:
			ok, err = matchField(p, val, present, field)
		default:
			return false, fmt.Errorf("%s: pattern value must be an object or a list, got %T", field, p)
		}
		if err != nil || !ok {
			return false, err
		}
	}
	return true, nil
}

// matchField applies a list of matchers to one event field.
func matchField(matchers []any, val any, present bool, path string) (bool, error) {
	values := []any{val}
	if l, ok := val.([]any); ok {
		values = l
	}
	for _, m := range matchers {
		if op, ok := m.(map[string]any); ok {
			if ex, isExists := op["exists"]; isExists && len(op) == 1 {
				want, ok := ex.(bool)
				if !ok {
					return false, fmt.Errorf("%s: exists takes true or false", path)
				}
				if want == present {
					return true, nil
				}
				continue
			}
		}
		if !present {
			continue
		}
		for _, v := range values {
			ok, err := matchValue(m, v, path)
			if err != nil {
				return false, err
			}
			if ok {
				return true, nil
			}
		}
	}
	return false, nil
}

// matchValue applies one matcher (a literal or an operator object) to one scalar value.
func matchValue(m, v any, path string) (bool, error) {
	op, ok := m.(map[string]any)
	if !ok {
		return equalLiteral(m, v), nil
	}
	if len(op) != 1 {
		return false, fmt.Errorf("%s: a matcher object holds one operator, got %d", path, len(op))
	}
	for name, arg := range op {
		switch name {
		case "prefix", "suffix", "equals-ignore-case":
			want, ok := arg.(string)
			if !ok {
				return false, fmt.Errorf("%s: %s takes a string", path, name)
			}
			s, ok := v.(string)
			if !ok {
				return false, nil
			}
			switch name {
			case "prefix":
				return strings.HasPrefix(s, want), nil
			case "suffix":
				return strings.HasSuffix(s, want), nil
			default:
				return strings.EqualFold(s, want), nil
			}
		case "anything-but":
			switch a := arg.(type) {
			case []any:
				for _, x := range a {
					if equalLiteral(x, v) {
						return false, nil
					}
				}
				return true, nil
			case map[string]any:
				ok, err := matchValue(a, v, path)
				return !ok && err == nil, err
			default:
				return !equalLiteral(a, v), nil
			}
		case "numeric":
			return matchNumeric(arg, v, path)
		default:
			return false, fmt.Errorf("%s: operator %q is not supported", path, name)
		}
	}
	return false, nil
}

func equalLiteral(a, b any) bool {
	an, aNum := a.(json.Number)
	bn, bNum := b.(json.Number)
	if aNum || bNum {
		if !aNum || !bNum {
			return false
		}
		x, ok1 := new(big.Float).SetString(an.String())
		y, ok2 := new(big.Float).SetString(bn.String())
		return ok1 && ok2 && x.Cmp(y) == 0
	}
	switch av := a.(type) {
	case string:
		bv, ok := b.(string)
		return ok && av == bv
	case bool:
		bv, ok := b.(bool)
		return ok && av == bv
	case nil:
		return b == nil
	}
	return false
}

// matchNumeric applies {"numeric": [op, n, op, n...]}.
func matchNumeric(arg, v any, path string) (bool, error) {
	conds, ok := arg.([]any)
	if !ok || len(conds) == 0 || len(conds)%2 != 0 {
		return false, fmt.Errorf("%s: numeric takes [operator, number, ...]", path)
	}
	vn, ok := v.(json.Number)
	if !ok {
		return false, nil
	}
	x, ok := new(big.Float).SetString(vn.String())
	if !ok {
		return false, nil
	}
	for i := 0; i < len(conds); i += 2 {
		op, _ := conds[i].(string)
		n, ok := conds[i+1].(json.Number)
		if !ok {
			return false, fmt.Errorf("%s: numeric operand %v is not a number", path, conds[i+1])
		}
		y, _ := new(big.Float).SetString(n.String())
		c := x.Cmp(y)
		var pass bool
		switch op {
		case "=":
			pass = c == 0
		case "<":
			pass = c < 0
		case "<=":
			pass = c <= 0
		case ">":
			pass = c > 0
		case ">=":
			pass = c >= 0
		default:
			return false, fmt.Errorf("%s: numeric operator %q is not supported", path, op)
		}
		if !pass {
			return false, nil
		}
	}
	return true, nil
}

// MatchAny reports whether event matches at least one of patterns, as Lambda applies the
// Filters of a FilterCriteria (no filters: everything matches).
func MatchAny(patterns []any, event any) (bool, error) {
	if len(patterns) == 0 {
		return true, nil
	}
	for _, p := range patterns {
		ok, err := MatchPattern(p, event)
		if err != nil || ok {
			return ok, err
		}
	}
	return false, nil
}
