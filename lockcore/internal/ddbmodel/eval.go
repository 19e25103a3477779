package ddbmodel

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// resolve finds the value at path in it.
func resolve(it Item, path docPath) (AV, bool) {
	v, ok := it[path[0].name]
	if !ok {
		return nil, false
	}
	for _, e := range path[1:] {
		if e.isIndex {
			l, ok := v.(*types.AttributeValueMemberL)
			if !ok || e.index >= len(l.Value) {
				return nil, false
			}
			v = l.Value[e.index]
		} else {
			m, ok := v.(*types.AttributeValueMemberM)
			if !ok {
				return nil, false
			}
			if v, ok = m.Value[e.name]; !ok {
				return nil, false
			}
		}
	}
	return v, true
}

// condOperandValue evaluates an operand of a condition; ok is false when it names a
// missing attribute (or size of a value that has none).
func condOperandValue(it Item, o operand) (AV, bool) {
	switch o := o.(type) {
	case opValue:
		return o.v, true
	case opPath:
		return resolve(it, o.path)
	case opSize:
		v, ok := resolve(it, o.path)
		if !ok {
			return nil, false
		}
		n := -1
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			// DynamoDB Local counts UTF-16 code units (Java's String.length).
			n = 0
			for _, r := range v.Value {
				n += utf16.RuneLen(r)
			}
		case *types.AttributeValueMemberB:
			n = len(v.Value)
		case *types.AttributeValueMemberSS:
			n = len(v.Value)
		case *types.AttributeValueMemberNS:
			n = len(v.Value)
		case *types.AttributeValueMemberBS:
			n = len(v.Value)
		case *types.AttributeValueMemberL:
			n = len(v.Value)
		case *types.AttributeValueMemberM:
			n = len(v.Value)
		}
		if n < 0 {
			return nil, false
		}
		return &types.AttributeValueMemberN{Value: fmt.Sprint(n)}, true
	}
	panic(fmt.Sprintf("ddbmodel: operand %T in a condition", o))
}

// evalCond evaluates c against it (nil: no item).
func evalCond(it Item, c cond) bool {
	switch c := c.(type) {
	case condAnd:
		return evalCond(it, c.a) && evalCond(it, c.b)
	case condOr:
		return evalCond(it, c.a) || evalCond(it, c.b)
	case condNot:
		return !evalCond(it, c.a)
	case condCmp:
		a, aok := condOperandValue(it, c.a)
		b, bok := condOperandValue(it, c.b)
		if c.op == "<>" {
			return !aok || !bok || !equal(a, b)
		}
		if !aok || !bok {
			return false
		}
		if c.op == "=" {
			return equal(a, b)
		}
		n, ok := compare(a, b)
		if !ok {
			return false
		}
		switch c.op {
		case "<":
			return n < 0
		case "<=":
			return n <= 0
		case ">":
			return n > 0
		case ">=":
			return n >= 0
		}
	case condBetween:
		a, aok := condOperandValue(it, c.a)
		lo, lok := condOperandValue(it, c.lo)
		hi, hok := condOperandValue(it, c.hi)
		if !aok || !lok || !hok {
			return false
		}
		n1, ok1 := compare(a, lo)
		n2, ok2 := compare(a, hi)
		return ok1 && ok2 && n1 >= 0 && n2 <= 0
	case condIn:
		a, ok := condOperandValue(it, c.a)
		if !ok {
			return false
		}
		for _, o := range c.list {
			if b, ok := condOperandValue(it, o); ok && equal(a, b) {
				return true
			}
		}
		return false
	case condFunc:
		return evalFunc(it, c)
	}
	panic(fmt.Sprintf("ddbmodel: condition %T", c))
}

func evalFunc(it Item, c condFunc) bool {
	a, aok := condOperandValue(it, c.args[0])
	switch c.name {
	case "attribute_exists":
		return aok
	case "attribute_not_exists":
		return !aok
	}
	b, bok := condOperandValue(it, c.args[1])
	if !aok || !bok {
		return false
	}
	switch c.name {
	case "attribute_type":
		return typeOf(a) == avString(b)
	case "begins_with":
		switch a := a.(type) {
		case *types.AttributeValueMemberS:
			b, ok := b.(*types.AttributeValueMemberS)
			return ok && strings.HasPrefix(a.Value, b.Value)
		case *types.AttributeValueMemberB:
			b, ok := b.(*types.AttributeValueMemberB)
			return ok && bytes.HasPrefix(a.Value, b.Value)
		}
		return false
	case "contains":
		switch a := a.(type) {
		case *types.AttributeValueMemberS:
			b, ok := b.(*types.AttributeValueMemberS)
			return ok && strings.Contains(a.Value, b.Value)
		case *types.AttributeValueMemberB:
			b, ok := b.(*types.AttributeValueMemberB)
			return ok && bytes.Contains(a.Value, b.Value)
		case *types.AttributeValueMemberSS:
			b, ok := b.(*types.AttributeValueMemberS)
			return ok && slices.Contains(a.Value, b.Value)
		case *types.AttributeValueMemberNS:
			b, ok := b.(*types.AttributeValueMemberN)
			if !ok {
				return false
			}
			for _, e := range a.Value {
				if mustNumber(e).cmp(mustNumber(b.Value)) == 0 {
					return true
				}
			}
			return false
		case *types.AttributeValueMemberBS:
			b, ok := b.(*types.AttributeValueMemberB)
			if !ok {
				return false
			}
			for _, e := range a.Value {
				if bytes.Equal(e, b.Value) {
					return true
				}
			}
			return false
		case *types.AttributeValueMemberL:
			for _, e := range a.Value {
				if equal(e, b) {
					return true
				}
			}
			return false
		}
		return false
	}
	panic("ddbmodel: function " + c.name)
}

// updates --------------------------------------------------------------------------

const (
	msgMissingAttr    = "The provided expression refers to an attribute that does not exist in the item"
	msgBadOperandType = "An operand in the update expression has an incorrect data type"
	msgBadDocPath     = "The document path provided in the update expression is invalid for update"
)

// targets returns the paths an update writes, in order.
func (u *updateExpr) targets() []docPath {
	var ps []docPath
	for _, a := range u.set {
		ps = append(ps, a.path)
	}
	ps = append(ps, u.remove...)
	for _, a := range u.add {
		ps = append(ps, a.path)
	}
	for _, a := range u.delete {
		ps = append(ps, a.path)
	}
	return ps
}

// checkKeyUpdate refuses an update that writes a key attribute. DynamoDB Local makes
// this check only once the condition held.
func checkKeyUpdate(u *updateExpr, keyNames []string) string {
	for _, p := range u.targets() {
		if slices.Contains(keyNames, p[0].name) {
			return fmt.Sprintf("One or more parameter values were invalid: Cannot update attribute %s. This attribute is part of the key", p[0].name)
		}
	}
	return ""
}

// checkUpdate makes the static checks DynamoDB makes on an update expression before it
// reads the item: no two paths overlapping.
func checkUpdate(u *updateExpr) string {
	if msg := checkOverlap(u.targets()); msg != "" {
		return "Invalid UpdateExpression: " + msg
	}
	return ""
}

// declaredSize is what DynamoDB Local charges an update before it reads the item: for
// each SET and ADD action, the bytes of its path's names and the size of every value
// placeholder on its right-hand side (each time it appears). More than 400 KB is
// refused as too large even when the condition would fail.
func (u *updateExpr) declaredSize() int {
	n := 0
	pathBytes := func(p docPath) int {
		b := 0
		for _, e := range p {
			if !e.isIndex {
				b += len(e.name)
			}
		}
		return b
	}
	var operandBytes func(o operand) int
	operandBytes = func(o operand) int {
		switch o := o.(type) {
		case opValue:
			return valueSize(o.v)
		case opIfNotExists:
			return operandBytes(o.def)
		case opListAppend:
			return operandBytes(o.a) + operandBytes(o.b)
		case opArith:
			return operandBytes(o.a) + operandBytes(o.b)
		}
		return 0
	}
	for _, a := range u.set {
		n += pathBytes(a.path) + operandBytes(a.val)
	}
	for _, a := range u.add {
		n += pathBytes(a.path) + valueSize(a.val.v)
	}
	return n
}

// checkOverlap refuses two paths of which one is a prefix of the other (or that name
// the same step as a map key and as a list index).
func checkOverlap(ps []docPath) string {
	for i := range ps {
		for j := i + 1; j < len(ps); j++ {
			a, b := ps[i], ps[j]
			n := min(len(a), len(b))
			same := true
			for k := 0; k < n; k++ {
				if a[k].isIndex != b[k].isIndex {
					return fmt.Sprintf("Two document paths conflict with each other; must remove or rewrite one of these paths; path one: %s, path two: %s", a, b)
				}
				if a[k] != b[k] {
					same = false
					break
				}
			}
			if same {
				return fmt.Sprintf("Two document paths overlap with each other; must remove or rewrite one of these paths; path one: %s, path two: %s", a, b)
			}
		}
	}
	return ""
}

// updateError is a ValidationException raised while applying an update to an item.
type updateError struct{ msg string }

func (e *updateError) Error() string { return e.msg }

func failUpdate(msg string) { panic(&updateError{msg}) }

// setOperandValue evaluates the right-hand side of a SET against the item before the
// update.
func setOperandValue(it Item, o operand) AV {
	switch o := o.(type) {
	case opValue:
		return o.v
	case opPath:
		v, ok := resolve(it, o.path)
		if !ok {
			failUpdate(msgMissingAttr)
		}
		return v
	case opIfNotExists:
		if v, ok := resolve(it, o.path); ok {
			return v
		}
		return setOperandValue(it, o.def)
	case opListAppend:
		a, aok := setOperandValue(it, o.a).(*types.AttributeValueMemberL)
		b, bok := setOperandValue(it, o.b).(*types.AttributeValueMemberL)
		if !aok || !bok {
			failUpdate(msgBadOperandType)
		}
		return &types.AttributeValueMemberL{Value: append(slices.Clone(a.Value), b.Value...)}
	case opArith:
		a, aok := setOperandValue(it, o.a).(*types.AttributeValueMemberN)
		b, bok := setOperandValue(it, o.b).(*types.AttributeValueMemberN)
		if !aok || !bok {
			failUpdate(msgBadOperandType)
		}
		var r decimal
		if o.op == "+" {
			r = mustNumber(a.Value).add(mustNumber(b.Value))
		} else {
			r = mustNumber(a.Value).sub(mustNumber(b.Value))
		}
		if msg := r.check(); msg != "" {
			failUpdate(msg)
		}
		return &types.AttributeValueMemberN{Value: r.String()}
	}
	panic(fmt.Sprintf("ddbmodel: operand %T in an update", o))
}

// parentOf returns the container that holds path's last element in it.
func parentOf(it Item, path docPath) (AV, bool) {
	if len(path) == 1 {
		return nil, true
	}
	return resolve(it, path[:len(path)-1])
}

func setPath(it Item, path docPath, v AV) {
	if len(path) == 1 {
		it[path[0].name] = v
		return
	}
	parent, ok := parentOf(it, path)
	if !ok {
		failUpdate(msgBadDocPath)
	}
	last := path[len(path)-1]
	switch p := parent.(type) {
	case *types.AttributeValueMemberM:
		if last.isIndex {
			failUpdate(msgBadDocPath)
		}
		p.Value[last.name] = v
	case *types.AttributeValueMemberL:
		if !last.isIndex {
			failUpdate(msgBadDocPath)
		}
		if last.index >= len(p.Value) {
			p.Value = append(p.Value, v)
		} else {
			p.Value[last.index] = v
		}
	default:
		failUpdate(msgBadDocPath)
	}
}

func removePath(it Item, path docPath) {
	if len(path) == 1 {
		delete(it, path[0].name)
		return
	}
	parent, ok := parentOf(it, path)
	if !ok {
		failUpdate(msgBadDocPath)
	}
	last := path[len(path)-1]
	switch p := parent.(type) {
	case *types.AttributeValueMemberM:
		if last.isIndex {
			failUpdate(msgBadDocPath)
		}
		delete(p.Value, last.name)
	case *types.AttributeValueMemberL:
		if !last.isIndex {
			failUpdate(msgBadDocPath)
		}
		if last.index < len(p.Value) {
			p.Value = slices.Delete(p.Value, last.index, last.index+1)
		}
	default:
		failUpdate(msgBadDocPath)
	}
}

// applyUpdate applies u to old (nil: no item; key holds the key attributes) and returns
// the new item. It fails with an *updateError as DynamoDB does when an operand is
// missing or of the wrong type, a path's parent is missing, or arithmetic leaves the
// range of numbers.
func applyUpdate(old, key Item, u *updateExpr) (out Item, err error) {
	defer func() {
		if r := recover(); r != nil {
			e, ok := r.(*updateError)
			if !ok {
				panic(r)
			}
			out, err = nil, e
		}
	}()
	base := old
	if base == nil {
		base = key
	}
	// Every right-hand side reads the item as it was before the update.
	vals := make([]AV, len(u.set))
	for i, a := range u.set {
		vals[i] = normal(setOperandValue(base, a.val))
	}
	adds := make([]AV, len(u.add))
	for i, a := range u.add {
		adds[i] = addValue(base, a)
	}
	dels := make([]AV, len(u.delete))
	hasDel := make([]bool, len(u.delete))
	for i, a := range u.delete {
		dels[i], hasDel[i] = deleteValue(base, a)
	}
	nw := cloneItem(base)
	for i, a := range u.set {
		setPath(nw, a.path, vals[i])
	}
	// Removals from one list refer to the indexes before the update: remove from the
	// back.
	rem := slices.Clone(u.remove)
	slices.SortStableFunc(rem, func(a, b docPath) int {
		la, lb := a[len(a)-1], b[len(b)-1]
		if la.isIndex && lb.isIndex {
			return lb.index - la.index
		}
		return 0
	})
	for _, p := range rem {
		removePath(nw, p)
	}
	for i, a := range u.add {
		setPath(nw, a.path, adds[i])
	}
	for i, a := range u.delete {
		if hasDel[i] {
			setPath(nw, a.path, dels[i])
		} else if _, ok := resolve(nw, a.path); ok {
			removePath(nw, a.path)
		}
	}
	return nw, nil
}

// addValue computes the value ADD leaves at a path.
func addValue(it Item, a pathValue) AV {
	cur, ok := resolve(it, a.path)
	if !ok {
		return normal(a.val.v)
	}
	switch v := a.val.v.(type) {
	case *types.AttributeValueMemberN:
		c, ok := cur.(*types.AttributeValueMemberN)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		r := mustNumber(c.Value).add(mustNumber(v.Value))
		if msg := r.check(); msg != "" {
			failUpdate(msg)
		}
		return &types.AttributeValueMemberN{Value: r.String()}
	case *types.AttributeValueMemberSS:
		c, ok := cur.(*types.AttributeValueMemberSS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.Clone(c.Value)
		for _, e := range v.Value {
			if !slices.Contains(out, e) {
				out = append(out, e)
			}
		}
		return &types.AttributeValueMemberSS{Value: out}
	case *types.AttributeValueMemberNS:
		c, ok := cur.(*types.AttributeValueMemberNS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.Clone(c.Value)
		for _, e := range v.Value {
			e = mustNumber(e).String()
			if !slices.ContainsFunc(out, func(x string) bool { return mustNumber(x).cmp(mustNumber(e)) == 0 }) {
				out = append(out, e)
			}
		}
		return &types.AttributeValueMemberNS{Value: out}
	case *types.AttributeValueMemberBS:
		c, ok := cur.(*types.AttributeValueMemberBS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.Clone(c.Value)
		for _, e := range v.Value {
			if !slices.ContainsFunc(out, func(x []byte) bool { return bytes.Equal(x, e) }) {
				out = append(out, bytes.Clone(e))
			}
		}
		return &types.AttributeValueMemberBS{Value: out}
	}
	panic("ddbmodel: ADD of a " + typeOf(a.val.v))
}

// deleteValue computes the set DELETE leaves at a path (ok false: nothing is left, or
// there was nothing).
func deleteValue(it Item, a pathValue) (AV, bool) {
	cur, ok := resolve(it, a.path)
	if !ok {
		// Nothing to delete, but the path must fit the item: its parent a map (or
		// a list, for an index).
		parent, ok := parentOf(it, a.path)
		last := a.path[len(a.path)-1]
		if !ok || parent != nil && (last.isIndex && typeOf(parent) != tL || !last.isIndex && typeOf(parent) != tM) {
			failUpdate(msgBadDocPath)
		}
		return nil, false
	}
	switch v := a.val.v.(type) {
	case *types.AttributeValueMemberSS:
		c, ok := cur.(*types.AttributeValueMemberSS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.DeleteFunc(slices.Clone(c.Value), func(x string) bool { return slices.Contains(v.Value, x) })
		return &types.AttributeValueMemberSS{Value: out}, len(out) > 0
	case *types.AttributeValueMemberNS:
		c, ok := cur.(*types.AttributeValueMemberNS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.DeleteFunc(slices.Clone(c.Value), func(x string) bool {
			return slices.ContainsFunc(v.Value, func(y string) bool { return mustNumber(x).cmp(mustNumber(y)) == 0 })
		})
		return &types.AttributeValueMemberNS{Value: out}, len(out) > 0
	case *types.AttributeValueMemberBS:
		c, ok := cur.(*types.AttributeValueMemberBS)
		if !ok {
			failUpdate(msgBadOperandType)
		}
		out := slices.DeleteFunc(slices.Clone(c.Value), func(x []byte) bool {
			return slices.ContainsFunc(v.Value, func(y []byte) bool { return bytes.Equal(x, y) })
		})
		return &types.AttributeValueMemberBS{Value: out}, len(out) > 0
	}
	panic("ddbmodel: DELETE of a " + typeOf(a.val.v))
}

// project returns the parts of it that paths name (a ProjectionExpression).
func project(it Item, paths []docPath) Item {
	if it == nil {
		return nil
	}
	out := Item{}
	for _, p := range paths {
		v, ok := resolve(it, p)
		if !ok {
			continue
		}
		projectInto(out, p, normal(v))
	}
	return out
}

// projectInto writes v at path into out, creating maps and lists on the way (a list
// keeps the projected elements in order, without gaps).
func projectInto(out Item, path docPath, v AV) {
	if len(path) == 1 {
		out[path[0].name] = v
		return
	}
	var container AV = nil
	cur, ok := out[path[0].name]
	if ok {
		container = cur
	} else {
		if path[1].isIndex {
			container = &types.AttributeValueMemberL{}
		} else {
			container = &types.AttributeValueMemberM{Value: map[string]AV{}}
		}
		out[path[0].name] = container
	}
	for i := 1; i < len(path); i++ {
		e := path[i]
		lastStep := i == len(path)-1
		switch c := container.(type) {
		case *types.AttributeValueMemberM:
			if lastStep {
				c.Value[e.name] = v
				return
			}
			nx, ok := c.Value[e.name]
			if !ok {
				if path[i+1].isIndex {
					nx = &types.AttributeValueMemberL{}
				} else {
					nx = &types.AttributeValueMemberM{Value: map[string]AV{}}
				}
				c.Value[e.name] = nx
			}
			container = nx
		case *types.AttributeValueMemberL:
			// Projected list elements are appended in the order they are named; a
			// second path into the same element is rare and not merged.
			if lastStep {
				c.Value = append(c.Value, v)
				return
			}
			var nx AV
			if path[i+1].isIndex {
				nx = &types.AttributeValueMemberL{}
			} else {
				nx = &types.AttributeValueMemberM{Value: map[string]AV{}}
			}
			c.Value = append(c.Value, nx)
			container = nx
		default:
			return
		}
	}
}
