package shop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// Limits of the messages the service accepts.
const (
	MaxIDBytes     = 256     // orderId, customerId, adjustmentId
	MaxSKUBytes    = 64      // sku
	MaxLines       = 50      // lines of one order
	MaxQty         = 10000   // qty of one line
	MaxDelta       = 1000000 // |delta| of one adjustment
	MaxReasonBytes = 256     // reason of one adjustment
	MaxBodyBytes   = 256 << 10
)

// Line is one line of an order: qty units of one SKU.
type Line struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

// Order is the body of an orders-queue message.
type Order struct {
	OrderID    string `json:"orderId"`
	CustomerID string `json:"customerId"`
	Lines      []Line `json:"lines"`
}

// Adjustment is the detail of a StockAdjusted event: delta units added to (or, when
// negative, removed from) the available stock of one SKU.
type Adjustment struct {
	AdjustmentID string `json:"adjustmentId"`
	SKU          string `json:"sku"`
	Delta        int    `json:"delta"`
	Reason       string `json:"reason"`
}

// ErrInvalid matches every validation error (*FieldError).
var ErrInvalid = errors.New("shop: invalid input")

// FieldError names the field of a message that is missing or invalid, e.g.
// "lines[2].qty: must be between 1 and 10000". It matches ErrInvalid.
type FieldError struct {
	Field  string // JSON path of the field ("" for the document as a whole)
	Reason string
}

func (e *FieldError) Error() string {
	if e.Field == "" {
		return e.Reason
	}
	return e.Field + ": " + e.Reason
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }

func fieldErr(field, format string, args ...any) *FieldError {
	return &FieldError{Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DecodeOrder parses and validates an orders-queue message body; it is DecodeOrderFields
// without the list of ignored fields.
func DecodeOrder(body []byte) (Order, error) {
	o, _, err := DecodeOrderFields(body)
	return o, err
}

// DecodeOrderFields parses and validates an orders-queue message body and also returns the
// JSON paths of the fields it ignored (e.g. "coupon", "lines[1].giftWrap").
//
// The body must be one JSON object (nothing after it). Fields this version does not know
// are accepted and ignored, so that a producer can add an optional field without sending
// every message to the dead-letter queue; the caller logs them. Every known field is
// required (so a misspelt "quantity" still fails: lines[i].qty is missing) and checked:
//
//   - orderId, customerId: 1..256 bytes of UTF-8 without control characters (as sent:
//     invalid UTF-8 and unpaired UTF-16 surrogate escapes such as "\ud800" are errors,
//     not replaced with U+FFFD as encoding/json would);
//   - lines: 1..50 entries; each sku 1..64 characters of [A-Za-z0-9._-] and appearing at
//     most once per order (a repeated SKU is rejected, not merged, so that the sender's
//     mistake is visible); each qty an integer 1..10000.
//
// Every error is a *FieldError naming the field (matching ErrInvalid); a wrong type is an
// error too ("lines[0].qty: must be an integer in range, got string").
func DecodeOrderFields(body []byte) (o Order, ignored []string, err error) {
	var raw orderJSON
	if ignored, err = objectUnmarshal("", body, &raw); err != nil {
		return Order{}, nil, err
	}
	o, err = decodeOrder(&raw, &ignored)
	if err != nil {
		return Order{}, nil, err
	}
	return o, ignored, nil
}

// orderJSON is an order as sent: nil pointers are missing fields.
type orderJSON struct {
	OrderID    *string           `json:"orderId"`
	CustomerID *string           `json:"customerId"`
	Lines      []json.RawMessage `json:"lines"`
}

func decodeOrder(raw *orderJSON, ignored *[]string) (Order, error) {
	var o Order
	var err error
	if o.OrderID, err = checkID("orderId", raw.OrderID); err != nil {
		return Order{}, err
	}
	if o.CustomerID, err = checkID("customerId", raw.CustomerID); err != nil {
		return Order{}, err
	}
	switch {
	case raw.Lines == nil:
		return Order{}, fieldErr("lines", "is required")
	case len(raw.Lines) == 0:
		return Order{}, fieldErr("lines", "must hold at least one line")
	case len(raw.Lines) > MaxLines:
		return Order{}, fieldErr("lines", "holds %d lines; at most %d are allowed", len(raw.Lines), MaxLines)
	}
	seen := make(map[string]int, len(raw.Lines))
	o.Lines = make([]Line, 0, len(raw.Lines))
	for i, rl := range raw.Lines {
		prefix := fmt.Sprintf("lines[%d]", i)
		var l struct {
			SKU *string `json:"sku"`
			Qty *int    `json:"qty"`
		}
		more, err := objectUnmarshal(prefix, rl, &l)
		if err != nil {
			return Order{}, err
		}
		*ignored = append(*ignored, more...)
		sku, err := checkSKU(prefix+".sku", l.SKU)
		if err != nil {
			return Order{}, err
		}
		if j, dup := seen[sku]; dup {
			return Order{}, fieldErr(prefix+".sku", "%q repeats lines[%d]; list each SKU once", sku, j)
		}
		seen[sku] = i
		switch {
		case l.Qty == nil:
			return Order{}, fieldErr(prefix+".qty", "is required")
		case *l.Qty < 1 || *l.Qty > MaxQty:
			return Order{}, fieldErr(prefix+".qty", "must be between 1 and %d, got %d", MaxQty, *l.Qty)
		}
		o.Lines = append(o.Lines, Line{SKU: sku, Qty: *l.Qty})
	}
	return o, nil
}

// DecodeAdjustment parses and validates the detail of a StockAdjusted event; it is
// DecodeAdjustmentFields without the list of ignored fields.
func DecodeAdjustment(detail []byte) (Adjustment, error) {
	a, _, err := DecodeAdjustmentFields(detail)
	return a, err
}

// DecodeAdjustmentFields parses and validates the detail of a StockAdjusted event as
// DecodeOrderFields does an order: adjustmentId (1..256 bytes), sku (as in orders) and
// delta (a non-zero integer with |delta| <= 1000000) are required; reason is optional (at
// most 256 bytes, no control characters). Unknown fields are accepted and returned in
// ignored; wrong types, missing required fields and bad values are *FieldErrors.
func DecodeAdjustmentFields(detail []byte) (a Adjustment, ignored []string, err error) {
	var raw adjustmentJSON
	if ignored, err = objectUnmarshal("", detail, &raw); err != nil {
		return Adjustment{}, nil, err
	}
	a, err = decodeAdjustment(&raw)
	if err != nil {
		return Adjustment{}, nil, err
	}
	return a, ignored, nil
}

// adjustmentJSON is an adjustment as sent: nil pointers are missing fields.
type adjustmentJSON struct {
	AdjustmentID *string `json:"adjustmentId"`
	SKU          *string `json:"sku"`
	Delta        *int    `json:"delta"`
	Reason       *string `json:"reason"`
}

func decodeAdjustment(raw *adjustmentJSON) (Adjustment, error) {
	var a Adjustment
	var err error
	if a.AdjustmentID, err = checkID("adjustmentId", raw.AdjustmentID); err != nil {
		return Adjustment{}, err
	}
	if a.SKU, err = checkSKU("sku", raw.SKU); err != nil {
		return Adjustment{}, err
	}
	switch {
	case raw.Delta == nil:
		return Adjustment{}, fieldErr("delta", "is required")
	case *raw.Delta == 0:
		return Adjustment{}, fieldErr("delta", "must not be 0")
	case *raw.Delta > MaxDelta || *raw.Delta < -MaxDelta:
		return Adjustment{}, fieldErr("delta", "must be between -%d and %d, got %d", MaxDelta, MaxDelta, *raw.Delta)
	}
	a.Delta = *raw.Delta
	if raw.Reason != nil {
		r := *raw.Reason
		if err := checkText("reason", r, MaxReasonBytes); err != nil {
			return Adjustment{}, err
		}
		a.Reason = r
	}
	return a, nil
}

// Validate checks an order built in code against the rules of DecodeOrder.
func (o Order) Validate() error {
	// json.Marshal would replace invalid UTF-8 with U+FFFD, and the decode accept that.
	if err := validUTF8(map[string]string{"orderId": o.OrderID, "customerId": o.CustomerID}); err != nil {
		return err
	}
	b, err := json.Marshal(o)
	if err != nil {
		return fieldErr("", "cannot encode order: %v", err)
	}
	_, err = DecodeOrder(b)
	return err
}

// Validate checks an adjustment built in code against the rules of DecodeAdjustment.
func (a Adjustment) Validate() error {
	if err := validUTF8(map[string]string{"adjustmentId": a.AdjustmentID, "reason": a.Reason}); err != nil {
		return err
	}
	b, err := json.Marshal(a)
	if err != nil {
		return fieldErr("", "cannot encode adjustment: %v", err)
	}
	_, err = DecodeAdjustment(b)
	return err
}

// validUTF8 checks the text fields of a value built in code (field name -> value).
func validUTF8(fields map[string]string) error {
	for _, f := range slices.Sorted(maps.Keys(fields)) {
		if !utf8.ValidString(fields[f]) {
			return fieldErr(f, "must be valid UTF-8")
		}
	}
	return nil
}

// objectUnmarshal decodes one JSON object into v (a pointer to a struct with json tags),
// rejecting trailing data, and turns decoder errors into FieldErrors under prefix. Fields
// v has no place for are ignored and returned as JSON paths under prefix, sorted.
func objectUnmarshal(prefix string, b []byte, v any) (ignored []string, err error) {
	if len(b) > MaxBodyBytes {
		return nil, fieldErr(prefix, "is %d bytes; at most %d are accepted", len(b), MaxBodyBytes)
	}
	trimmed := bytes.TrimSpace(b)
	if len(trimmed) == 0 {
		return nil, fieldErr(prefix, "is empty; want a JSON object")
	}
	if trimmed[0] != '{' {
		return nil, fieldErr(prefix, "must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(trimmed))
	if err := dec.Decode(v); err != nil {
		return nil, jsonFieldErr(prefix, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, fieldErr(prefix, "unexpected data after the JSON object")
	}
	// The object decoded, so its keys can be walked. encoding/json matches names without
	// regard to case; so does this check.
	fields, err := objectKeys(prefix, trimmed)
	if err != nil {
		return nil, err
	}
	known := knownFields(reflect.TypeOf(v).Elem())
	seen := map[string]bool{}
	for _, f := range fields {
		k := f.key
		i := slices.IndexFunc(known, func(f string) bool { return strings.EqualFold(f, k) })
		switch {
		case i < 0:
			if p := join(prefix, k); !slices.Contains(ignored, p) {
				ignored = append(ignored, p)
			}
		case seen[known[i]]:
			// encoding/json keeps the last one, and another reader of the same message
			// (a producer in another language, an auditor) may well take the first.
			return nil, fieldErr(join(prefix, known[i]), "appears more than once (names match without regard to case)")
		default:
			seen[known[i]] = true
			if reason := rawTextErr(f.value); reason != "" {
				return nil, fieldErr(join(prefix, known[i]), "%s", reason)
			}
		}
	}
	slices.Sort(ignored)
	return ignored, nil
}

// rawField is one member of a JSON object: its key and its value as sent.
type rawField struct {
	key   string
	value json.RawMessage
}

// objectKeys returns the members of a JSON object (already known to decode), in order
// and with repeats.
func objectKeys(prefix string, obj []byte) ([]rawField, error) {
	dec := json.NewDecoder(bytes.NewReader(obj))
	if _, err := dec.Token(); err != nil { // {
		return nil, jsonFieldErr(prefix, err)
	}
	var fields []rawField
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return nil, jsonFieldErr(prefix, err)
		}
		k, _ := t.(string)
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, jsonFieldErr(prefix, err)
		}
		fields = append(fields, rawField{k, value})
	}
	return fields, nil
}

// rawTextErr says why a JSON string as sent (quotes and escapes included) does not hold
// Unicode text, or returns "" when it does or is not a string. encoding/json replaces
// invalid UTF-8 and unpaired UTF-16 surrogate escapes ("\ud800", which JavaScript's
// JSON.stringify writes for a string cut inside a surrogate pair) with U+FFFD without an
// error, so two different ids decoded to the same one — the second order was taken for a
// duplicate of the first and never decided — and checkText's UTF-8 check could never fire.
func rawTextErr(raw json.RawMessage) string {
	if len(raw) == 0 || raw[0] != '"' {
		return ""
	}
	if !utf8.Valid(raw) {
		return "must be valid UTF-8"
	}
	// The value decoded, so its escapes are well formed: \X, or \u and four hex digits.
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		switch {
		case !utf16.IsSurrogate(r):
		case r < 0xdc00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' &&
			utf16.DecodeRune(r, hex4(raw[i+3:i+7])) != unicode.ReplacementChar:
			i += 6 // a high surrogate followed by its low one: one character
		default:
			return fmt.Sprintf("must be valid Unicode text, got the unpaired UTF-16 surrogate \\u%04x", r)
		}
	}
	return ""
}

// hex4 parses four hex digits (already validated by the JSON decoder).
func hex4(b []byte) rune {
	n, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(n)
}

// knownFields returns the JSON names of a struct type's fields.
func knownFields(t reflect.Type) []string {
	var out []string
	for i := 0; i < t.NumField(); i++ {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		if name == "" {
			name = t.Field(i).Name
		}
		if name != "-" {
			out = append(out, name)
		}
	}
	return out
}

// FieldPath joins a JSON path prefix and a field path ("detail" + "sku" = "detail.sku";
// an empty field names the prefix itself).
func FieldPath(prefix, field string) string { return join(prefix, field) }

func join(prefix, field string) string {
	switch {
	case prefix == "":
		return field
	case field == "":
		return prefix
	}
	return prefix + "." + field
}

func jsonFieldErr(prefix string, err error) error {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	switch {
	case errors.As(err, &te):
		return fieldErr(join(prefix, te.Field), "must be %s, got %s", describeKind(te.Type.Kind()), te.Value)
	case errors.As(err, &se):
		return fieldErr(prefix, "malformed JSON at byte %d: %v", se.Offset, se)
	case errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF):
		return fieldErr(prefix, "truncated JSON")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok {
		return fieldErr(join(prefix, strings.Trim(f, `"`)), "unknown field")
	}
	return fieldErr(prefix, "invalid JSON: %s", strings.TrimPrefix(msg, "json: "))
}

func describeKind(k reflect.Kind) string {
	switch k {
	case reflect.String:
		return "a string"
	case reflect.Int, reflect.Int64, reflect.Int32:
		return "an integer in range"
	case reflect.Slice:
		return "an array"
	case reflect.Struct, reflect.Map:
		return "an object"
	}
	return "a " + k.String()
}

func checkID(field string, v *string) (string, error) {
	if v == nil {
		return "", fieldErr(field, "is required")
	}
	if *v == "" {
		return "", fieldErr(field, "must not be empty")
	}
	if err := checkText(field, *v, MaxIDBytes); err != nil {
		return "", err
	}
	return *v, nil
}

func checkText(field, v string, maxBytes int) error {
	if len(v) > maxBytes {
		return fieldErr(field, "is %d bytes; at most %d are allowed", len(v), maxBytes)
	}
	if !utf8.ValidString(v) {
		return fieldErr(field, "must be valid UTF-8")
	}
	for _, r := range v {
		if unicode.IsControl(r) {
			return fieldErr(field, "must not contain control characters")
		}
	}
	return nil
}

func checkSKU(field string, v *string) (string, error) {
	if v == nil {
		return "", fieldErr(field, "is required")
	}
	if err := ValidSKU(*v); err != nil {
		return "", fieldErr(field, "%s", err.Error())
	}
	return *v, nil
}

// ValidSKU reports whether sku is 1..64 characters of [A-Za-z0-9._-].
func ValidSKU(sku string) error {
	if sku == "" {
		return errors.New("must not be empty")
	}
	if len(sku) > MaxSKUBytes {
		return fmt.Errorf("is %d bytes; at most %d are allowed", len(sku), MaxSKUBytes)
	}
	for i := 0; i < len(sku); i++ {
		c := sku[i]
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%q: only letters, digits, '.', '_' and '-' are allowed", sku)
		}
	}
	return nil
}
