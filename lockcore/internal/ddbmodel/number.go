package ddbmodel

import (
	"math/big"
	"strings"
)

// decimal is a DynamoDB number: unscaled × 10^exp, exact. DynamoDB keeps up to 38
// significant digits and magnitudes from 1e-130 to below 1e126; arithmetic is exact and
// a result that needs more digits is refused (not rounded).
type decimal struct {
	unscaled *big.Int
	exp      int
}

const (
	maxPrecision = 38
	maxAdjExp    = 125  // the largest number is 9.99…e125
	minAdjExp    = -130 // the smallest positive number is 1e-130
)

var bigTen = big.NewInt(10)

// parseNumber parses a number as DynamoDB accepts it: an optional sign, digits with an
// optional decimal point, an optional exponent. It does not check the range.
func parseNumber(s string) (decimal, bool) {
	if s == "" {
		return decimal{}, false
	}
	i := 0
	neg := false
	if s[i] == '+' || s[i] == '-' {
		neg = s[i] == '-'
		i++
	}
	var digits strings.Builder
	sawDigit, sawPoint := false, false
	frac := 0
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= '0' && c <= '9':
			digits.WriteByte(c)
			sawDigit = true
			if sawPoint {
				frac++
			}
		case c == '.' && !sawPoint:
			sawPoint = true
		default:
			goto rest
		}
	}
rest:
	if !sawDigit {
		return decimal{}, false
	}
	exp := 0
	if i < len(s) {
		if s[i] != 'e' && s[i] != 'E' {
			return decimal{}, false
		}
		i++
		eneg := false
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			eneg = s[i] == '-'
			i++
		}
		if i == len(s) {
			return decimal{}, false
		}
		for ; i < len(s); i++ {
			c := s[i]
			if c < '0' || c > '9' {
				return decimal{}, false
			}
			if exp < 1_000_000 {
				exp = exp*10 + int(c-'0')
			}
		}
		if eneg {
			exp = -exp
		}
	}
	u, ok := new(big.Int).SetString(digits.String(), 10)
	if !ok {
		return decimal{}, false
	}
	if neg {
		u.Neg(u)
	}
	return decimal{unscaled: u, exp: exp - frac}.normal(), true
}

// normal strips trailing zeros of the unscaled value (zero has exp 0).
func (d decimal) normal() decimal {
	if d.unscaled.Sign() == 0 {
		return decimal{unscaled: new(big.Int), exp: 0}
	}
	u := new(big.Int).Set(d.unscaled)
	exp := d.exp
	q, r := new(big.Int), new(big.Int)
	for {
		q.QuoRem(u, bigTen, r)
		if r.Sign() != 0 {
			break
		}
		u.Set(q)
		exp++
	}
	return decimal{unscaled: u, exp: exp}
}

// precision is the number of significant digits (of a normal decimal).
func (d decimal) precision() int {
	if d.unscaled.Sign() == 0 {
		return 1
	}
	return len(new(big.Int).Abs(d.unscaled).String())
}

// check returns the ValidationException message for a number DynamoDB cannot store.
func (d decimal) check() string {
	if d.unscaled.Sign() == 0 {
		return ""
	}
	p := d.precision()
	if p > maxPrecision {
		return "DynamoDB only supports precision up to 38 digits"
	}
	adj := d.exp + p - 1
	if adj > maxAdjExp {
		return "Number overflow. Attempting to store a number with magnitude larger than supported range"
	}
	if adj < minAdjExp {
		return "Number underflow. Attempting to store a number with magnitude smaller than supported range"
	}
	return ""
}

// String formats d as DynamoDB returns numbers: plain notation, no exponent, no
// trailing zeros after the point.
func (d decimal) String() string {
	d = d.normal()
	neg := d.unscaled.Sign() < 0
	digits := new(big.Int).Abs(d.unscaled).String()
	var s string
	switch {
	case d.exp >= 0:
		if digits == "0" {
			return "0"
		}
		s = digits + strings.Repeat("0", d.exp)
	case -d.exp < len(digits):
		k := len(digits) + d.exp
		s = digits[:k] + "." + digits[k:]
	default:
		s = "0." + strings.Repeat("0", -d.exp-len(digits)) + digits
	}
	if neg {
		s = "-" + s
	}
	return s
}

// align returns the unscaled values of a and b at their common (smaller) exponent.
func align(a, b decimal) (*big.Int, *big.Int, int) {
	ua, ub := new(big.Int).Set(a.unscaled), new(big.Int).Set(b.unscaled)
	switch {
	case a.exp > b.exp:
		ua.Mul(ua, new(big.Int).Exp(bigTen, big.NewInt(int64(a.exp-b.exp)), nil))
		return ua, ub, b.exp
	case b.exp > a.exp:
		ub.Mul(ub, new(big.Int).Exp(bigTen, big.NewInt(int64(b.exp-a.exp)), nil))
		return ua, ub, a.exp
	}
	return ua, ub, a.exp
}

func (d decimal) cmp(o decimal) int {
	ua, ub, _ := align(d, o)
	return ua.Cmp(ub)
}

func (d decimal) add(o decimal) decimal {
	ua, ub, e := align(d, o)
	return decimal{unscaled: ua.Add(ua, ub), exp: e}.normal()
}

func (d decimal) sub(o decimal) decimal {
	ua, ub, e := align(d, o)
	return decimal{unscaled: ua.Sub(ua, ub), exp: e}.normal()
}

// numberSize is the size DynamoDB charges for a number: one byte of exponent, one byte
// per two digits of the mantissa (digits paired from the decimal point outward), and one
// more for a negative number; at most 21.
func numberSize(d decimal) int {
	d = d.normal()
	if d.unscaled.Sign() == 0 {
		return 1
	}
	digits := new(big.Int).Abs(d.unscaled).String()
	// Pair digits from the decimal point: the digit string covers positions
	// exp .. exp+len-1 (powers of ten); pad to even boundaries.
	lo := d.exp
	hi := d.exp + len(digits) // exclusive
	if lo%2 != 0 {
		lo-- // down to an even power
	}
	if hi%2 != 0 {
		hi++ // up to an even power
	}
	n := (hi-lo)/2 + 1
	if d.unscaled.Sign() < 0 {
		n++
	}
	return min(n, 21)
}
