package ddbmodel

import (
	"bytes"
	"fmt"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// Item is a DynamoDB item.
type Item = map[string]types.AttributeValue

// AV is a DynamoDB attribute value.
type AV = types.AttributeValue

// Type tags of attribute values, as attribute_type names them.
const (
	tS    = "S"
	tN    = "N"
	tB    = "B"
	tSS   = "SS"
	tNS   = "NS"
	tBS   = "BS"
	tM    = "M"
	tL    = "L"
	tNULL = "NULL"
	tBOOL = "BOOL"
)

var validTypes = map[string]bool{tS: true, tN: true, tB: true, tSS: true, tNS: true, tBS: true, tM: true, tL: true, tNULL: true, tBOOL: true}

// typeOf returns v's type tag ("" for nil or an unknown member).
func typeOf(v AV) string {
	switch v.(type) {
	case *types.AttributeValueMemberS:
		return tS
	case *types.AttributeValueMemberN:
		return tN
	case *types.AttributeValueMemberB:
		return tB
	case *types.AttributeValueMemberSS:
		return tSS
	case *types.AttributeValueMemberNS:
		return tNS
	case *types.AttributeValueMemberBS:
		return tBS
	case *types.AttributeValueMemberM:
		return tM
	case *types.AttributeValueMemberL:
		return tL
	case *types.AttributeValueMemberNULL:
		return tNULL
	case *types.AttributeValueMemberBOOL:
		return tBOOL
	}
	return ""
}

// typeName is the name DynamoDB's messages use for a type.
func typeName(t string) string { return t }

// mustNumber parses a stored (validated) number.
func mustNumber(s string) decimal {
	d, ok := parseNumber(s)
	if !ok {
		panic("ddbmodel: stored number does not parse: " + s)
	}
	return d
}

// checkValue validates an attribute value from a request and returns DynamoDB's
// ValidationException message for it ("" when valid). Numbers must parse and fit;
// sets must be non-empty and free of duplicates; NULL must be true.
func checkValue(v AV) string {
	switch v := v.(type) {
	case nil:
		return "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
	case *types.AttributeValueMemberS:
		if !utf8.ValidString(v.Value) {
			return "One or more parameter values were invalid: a string is not valid UTF-8"
		}
	case *types.AttributeValueMemberN:
		d, ok := parseNumber(v.Value)
		if !ok {
			return "A value provided cannot be converted into a number"
		}
		return d.check()
	case *types.AttributeValueMemberB:
		if v.Value == nil {
			return "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
		}
	case *types.AttributeValueMemberNULL:
		if !v.Value {
			return "One or more parameter values were invalid: Null attribute value types must have the value of true"
		}
	case *types.AttributeValueMemberBOOL:
	case *types.AttributeValueMemberSS:
		if len(v.Value) == 0 {
			return "One or more parameter values were invalid: An string set  may not be empty"
		}
		seen := map[string]bool{}
		for _, e := range v.Value {
			if seen[e] {
				return fmt.Sprintf("Input collection %v contains duplicates.", v.Value)
			}
			seen[e] = true
		}
	case *types.AttributeValueMemberBS:
		if len(v.Value) == 0 {
			return "One or more parameter values were invalid: Binary sets should not be empty"
		}
		seen := map[string]bool{}
		for _, e := range v.Value {
			if seen[string(e)] {
				return "Input collection contains duplicates."
			}
			seen[string(e)] = true
		}
	case *types.AttributeValueMemberNS:
		if len(v.Value) == 0 {
			return "One or more parameter values were invalid: An number set  may not be empty"
		}
		seen := map[string]bool{}
		for _, e := range v.Value {
			d, ok := parseNumber(e)
			if !ok {
				return "A value provided cannot be converted into a number"
			}
			if msg := d.check(); msg != "" {
				return msg
			}
			if seen[d.String()] {
				return fmt.Sprintf("Input collection %v contains duplicates.", v.Value)
			}
			seen[d.String()] = true
		}
	case *types.AttributeValueMemberM:
		for _, e := range v.Value {
			if msg := checkValue(e); msg != "" {
				return msg
			}
		}
	case *types.AttributeValueMemberL:
		for _, e := range v.Value {
			if msg := checkValue(e); msg != "" {
				return msg
			}
		}
	default:
		return "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
	}
	return ""
}

// normal returns a deep copy of v with numbers in DynamoDB's canonical form (v must be
// valid): what the model stores and returns.
func normal(v AV) AV { return copyValue(v, true) }

// CanonicalNumber returns a number's canonical text, as DynamoDB stores it: no exponent,
// no leading zeros, no trailing zeros after the point, no sign on zero.
func CanonicalNumber(s string) (string, bool) {
	d, ok := parseNumber(s)
	if !ok {
		return "", false
	}
	return d.String(), true
}

func copyValue(v AV, canon bool) AV {
	num := func(s string) string {
		if canon && !canonicalInt(s) {
			return mustNumber(s).String()
		}
		return s
	}
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return &types.AttributeValueMemberS{Value: v.Value}
	case *types.AttributeValueMemberN:
		return &types.AttributeValueMemberN{Value: num(v.Value)}
	case *types.AttributeValueMemberB:
		return &types.AttributeValueMemberB{Value: bytes.Clone(v.Value)}
	case *types.AttributeValueMemberNULL:
		return &types.AttributeValueMemberNULL{Value: true}
	case *types.AttributeValueMemberBOOL:
		return &types.AttributeValueMemberBOOL{Value: v.Value}
	case *types.AttributeValueMemberSS:
		return &types.AttributeValueMemberSS{Value: append([]string(nil), v.Value...)}
	case *types.AttributeValueMemberNS:
		out := make([]string, len(v.Value))
		for i, e := range v.Value {
			out[i] = num(e)
		}
		return &types.AttributeValueMemberNS{Value: out}
	case *types.AttributeValueMemberBS:
		out := make([][]byte, len(v.Value))
		for i, e := range v.Value {
			out[i] = bytes.Clone(e)
		}
		return &types.AttributeValueMemberBS{Value: out}
	case *types.AttributeValueMemberM:
		out := make(map[string]AV, len(v.Value))
		for k, e := range v.Value {
			out[k] = copyValue(e, canon)
		}
		return &types.AttributeValueMemberM{Value: out}
	case *types.AttributeValueMemberL:
		out := make([]AV, len(v.Value))
		for i, e := range v.Value {
			out[i] = copyValue(e, canon)
		}
		return &types.AttributeValueMemberL{Value: out}
	}
	panic(fmt.Sprintf("ddbmodel: unknown attribute value %T", v))
}

// cloneItem returns a deep copy of it with canonical numbers (nil stays nil).
// canonicalInt reports whether s is an integer in canonical text already ("0", "-12",
// no leading zeros, sign or exponent): most numbers the simulator's clients store, whose
// copies then need no parsing.
func canonicalInt(s string) bool {
	d := s
	if len(d) > 0 && d[0] == '-' {
		d = d[1:]
		if d == "0" {
			return false
		}
	}
	if len(d) == 0 || len(d) > 38 || (d[0] == '0' && len(d) > 1) {
		return false
	}
	for i := 0; i < len(d); i++ {
		if d[i] < '0' || d[i] > '9' {
			return false
		}
	}
	return true
}

func cloneItem(it Item) Item { return copyItem(it, true) }

func copyItem(it Item, canon bool) Item {
	if it == nil {
		return nil
	}
	out := make(Item, len(it))
	for k, v := range it {
		out[k] = copyValue(v, canon)
	}
	return out
}

// equal reports whether a and b are equal as DynamoDB compares values: numbers by value,
// sets regardless of order, lists in order, maps by their entries.
func equal(a, b AV) bool {
	switch a := a.(type) {
	case *types.AttributeValueMemberS:
		b, ok := b.(*types.AttributeValueMemberS)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberN:
		b, ok := b.(*types.AttributeValueMemberN)
		return ok && mustNumber(a.Value).cmp(mustNumber(b.Value)) == 0
	case *types.AttributeValueMemberB:
		b, ok := b.(*types.AttributeValueMemberB)
		return ok && bytes.Equal(a.Value, b.Value)
	case *types.AttributeValueMemberNULL:
		_, ok := b.(*types.AttributeValueMemberNULL)
		return ok
	case *types.AttributeValueMemberBOOL:
		b, ok := b.(*types.AttributeValueMemberBOOL)
		return ok && a.Value == b.Value
	case *types.AttributeValueMemberSS:
		b, ok := b.(*types.AttributeValueMemberSS)
		return ok && sameSet(a.Value, b.Value, func(s string) string { return s })
	case *types.AttributeValueMemberNS:
		b, ok := b.(*types.AttributeValueMemberNS)
		return ok && sameSet(a.Value, b.Value, func(s string) string { return mustNumber(s).String() })
	case *types.AttributeValueMemberBS:
		b, ok := b.(*types.AttributeValueMemberBS)
		return ok && sameSet(a.Value, b.Value, func(s []byte) string { return string(s) })
	case *types.AttributeValueMemberM:
		b, ok := b.(*types.AttributeValueMemberM)
		if !ok || len(a.Value) != len(b.Value) {
			return false
		}
		for k, av := range a.Value {
			bv, ok := b.Value[k]
			if !ok || !equal(av, bv) {
				return false
			}
		}
		return true
	case *types.AttributeValueMemberL:
		b, ok := b.(*types.AttributeValueMemberL)
		if !ok || len(a.Value) != len(b.Value) {
			return false
		}
		for i := range a.Value {
			if !equal(a.Value[i], b.Value[i]) {
				return false
			}
		}
		return true
	}
	return false
}

func sameSet[T any](a, b []T, key func(T) string) bool {
	if len(a) != len(b) {
		return false
	}
	m := make(map[string]bool, len(a))
	for _, e := range a {
		m[key(e)] = true
	}
	for _, e := range b {
		if !m[key(e)] {
			return false
		}
	}
	return true
}

// compare orders two scalars of the same type (S by UTF-8 bytes, N by value, B by
// bytes); ok is false for other types or mixed types.
func compare(a, b AV) (int, bool) {
	switch a := a.(type) {
	case *types.AttributeValueMemberS:
		if b, ok := b.(*types.AttributeValueMemberS); ok {
			return strings.Compare(a.Value, b.Value), true
		}
	case *types.AttributeValueMemberN:
		if b, ok := b.(*types.AttributeValueMemberN); ok {
			return mustNumber(a.Value).cmp(mustNumber(b.Value)), true
		}
	case *types.AttributeValueMemberB:
		if b, ok := b.(*types.AttributeValueMemberB); ok {
			return bytes.Compare(a.Value, b.Value), true
		}
	}
	return 0, false
}

// valueSize is the size DynamoDB charges for a value: UTF-8 bytes of a string, raw bytes
// of a binary, numberSize for a number, 1 for BOOL and NULL, the sum of the members of a
// set, and 3 bytes plus 1 per element (and the key's bytes) for a list or map.
func valueSize(v AV) int {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		return len(v.Value)
	case *types.AttributeValueMemberN:
		return numberSize(mustNumber(v.Value))
	case *types.AttributeValueMemberB:
		return len(v.Value)
	case *types.AttributeValueMemberNULL, *types.AttributeValueMemberBOOL:
		return 1
	case *types.AttributeValueMemberSS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberNS:
		n := 0
		for _, e := range v.Value {
			n += numberSize(mustNumber(e))
		}
		return n
	case *types.AttributeValueMemberBS:
		n := 0
		for _, e := range v.Value {
			n += len(e)
		}
		return n
	case *types.AttributeValueMemberM:
		n := 3
		for k, e := range v.Value {
			n += len(k) + valueSize(e) + 1
		}
		return n
	case *types.AttributeValueMemberL:
		n := 3
		for _, e := range v.Value {
			n += valueSize(e) + 1
		}
		return n
	}
	return 0
}

// ItemSize returns an item's size as DynamoDB counts it against the 400 KB limit: the
// UTF-8 bytes of each attribute name plus the size of its value.
func ItemSize(it Item) int {
	n := 0
	for k, v := range it {
		n += len(k) + valueSize(v)
	}
	return n
}

// MaxItemSize is DynamoDB's item size limit (400 KB).
const MaxItemSize = 400 << 10

// sortedNames returns it's attribute names in order.
func sortedNames(it Item) []string {
	ks := make([]string, 0, len(it))
	for k := range it {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
