package shop_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/turnstile-locks/turnstile/internal/shop"
)

func TestDecodeOrder(t *testing.T) {
	long := strings.Repeat("x", shop.MaxIDBytes+1)
	manyLines := `[` + strings.Repeat(`{"sku":"A","qty":1},`, shop.MaxLines) + `{"sku":"A","qty":1}]`
	tests := []struct {
		name, body string
		want       shop.Order
		wantField  string // "" = valid
		wantReason string
	}{
		{"valid", `{"orderId":"ord-1","customerId":"c-1","lines":[{"sku":"MUG-RED-350","qty":2},{"sku":"tee.blk_m","qty":10000}]}`,
			shop.Order{OrderID: "ord-1", CustomerID: "c-1", Lines: []shop.Line{{SKU: "MUG-RED-350", Qty: 2}, {SKU: "tee.blk_m", Qty: 10000}}}, "", ""},
		{"whitespace around", " \n{\"orderId\":\"o\",\"customerId\":\"c\",\"lines\":[{\"sku\":\"A\",\"qty\":1}]}\n ",
			shop.Order{OrderID: "o", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, "", ""},
		{"empty body", ``, shop.Order{}, "", "empty"},
		{"not an object", `[1]`, shop.Order{}, "", "must be a JSON object"},
		{"truncated", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1}`, shop.Order{}, "", "truncated"},
		{"trailing data", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1}]} {}`, shop.Order{}, "", "after the JSON object"},
		{"missing orderId", `{"customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "is required"},
		{"null orderId", `{"orderId":null,"customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "is required"},
		{"empty orderId", `{"orderId":"","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "must not be empty"},
		{"long orderId", `{"orderId":"` + long + `","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "at most 256"},
		{"control char", `{"orderId":"a\u0000b","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "control"},
		// encoding/json turns these into U+FFFD without an error: two different ids
		// became one (found by review).
		{"lone high surrogate", `{"orderId":"a\ud800","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "unpaired UTF-16 surrogate \\ud800"},
		{"lone low surrogate", `{"orderId":"o","customerId":"c\uDC00x","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "customerId", "unpaired UTF-16 surrogate \\udc00"},
		{"high surrogate then not a low one", `{"orderId":"a\ud800\u0041","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "unpaired"},
		{"two high surrogates", `{"orderId":"a\ud800\ud800","customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "unpaired"},
		{"invalid UTF-8", "{\"orderId\":\"a\xffb\",\"customerId\":\"c\",\"lines\":[{\"sku\":\"A\",\"qty\":1}]}", shop.Order{}, "orderId", "valid UTF-8"},
		{"surrogate pair", `{"orderId":"a\ud83d\ude00\\u\"","customerId":"c","lines":[{"sku":"A","qty":1}]}`,
			shop.Order{OrderID: "a\U0001F600\\u\"", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, "", ""},
		{"escaped backslash before u", `{"orderId":"a\\ud800","customerId":"c","lines":[{"sku":"A","qty":1}]}`,
			shop.Order{OrderID: `a\ud800`, CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, "", ""},
		{"numeric orderId", `{"orderId":7,"customerId":"c","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "must be a string, got number"},
		{"missing customer", `{"orderId":"o","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "customerId", "is required"},
		{"unknown field ignored", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1}],"coupon":"X"}`,
			shop.Order{OrderID: "o", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, "", ""},
		// Found by an outside review: encoding/json keeps the last of repeated names,
		// matched without regard to case — {"qty":1,"QTY":9999} reserved 9999.
		{"qty twice in two cases", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1,"QTY":9999}]}`, shop.Order{}, "lines[0].qty", "more than once"},
		{"qty twice", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1,"qty":9999}]}`, shop.Order{}, "lines[0].qty", "more than once"},
		{"orderId twice", `{"orderId":"o-1","customerId":"c","OrderID":"o-2","lines":[{"sku":"A","qty":1}]}`, shop.Order{}, "orderId", "more than once"},
		{"sku twice", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","SKU":"B","qty":1}]}`, shop.Order{}, "lines[0].sku", "more than once"},
		{"unknown field twice ignored", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1}],"coupon":"X","Coupon":"Y"}`,
			shop.Order{OrderID: "o", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, "", ""},
		{"misspelt qty is still missing", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","quantity":1}]}`, shop.Order{}, "lines[0].qty", "is required"},
		{"unknown field does not hide a wrong type", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":"1"}],"coupon":"X"}`, shop.Order{}, "lines[0].qty", "must be an integer"},
		{"no lines", `{"orderId":"o","customerId":"c"}`, shop.Order{}, "lines", "is required"},
		{"empty lines", `{"orderId":"o","customerId":"c","lines":[]}`, shop.Order{}, "lines", "at least one"},
		{"lines not array", `{"orderId":"o","customerId":"c","lines":{}}`, shop.Order{}, "lines", "must be an array"},
		{"too many lines", `{"orderId":"o","customerId":"c","lines":` + manyLines + `}`, shop.Order{}, "lines", "at most 50"},
		{"line not object", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1},7]}`, shop.Order{}, "lines[1]", "must be a JSON object"},
		{"missing sku", `{"orderId":"o","customerId":"c","lines":[{"qty":1}]}`, shop.Order{}, "lines[0].sku", "is required"},
		{"bad sku", `{"orderId":"o","customerId":"c","lines":[{"sku":"A#B","qty":1}]}`, shop.Order{}, "lines[0].sku", "only letters"},
		{"duplicate sku", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1},{"sku":"B","qty":1},{"sku":"A","qty":2}]}`, shop.Order{}, "lines[2].sku", "repeats lines[0]"},
		{"qty zero", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1},{"sku":"B","qty":0}]}`, shop.Order{}, "lines[1].qty", "between 1 and 10000"},
		{"qty negative", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":-2}]}`, shop.Order{}, "lines[0].qty", "between 1 and 10000"},
		{"qty too big", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":10001}]}`, shop.Order{}, "lines[0].qty", "between 1 and 10000"},
		{"qty fraction", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1.5}]}`, shop.Order{}, "lines[0].qty", "must be an integer in range, got number 1.5"},
		{"qty string", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":"2"}]}`, shop.Order{}, "lines[0].qty", "must be an integer in range, got string"},
		{"qty huge", `{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1e30}]}`, shop.Order{}, "lines[0].qty", "must be an integer in range"},
		{"missing qty", `{"orderId":"o","customerId":"c","lines":[{"sku":"A"}]}`, shop.Order{}, "lines[0].qty", "is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shop.DecodeOrder([]byte(tt.body))
			if tt.wantReason == "" {
				if err != nil {
					t.Fatalf("err = %v", err)
				}
				if !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
				return
			}
			var fe *shop.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, shop.ErrInvalid) {
				t.Fatalf("err = %v (%T), want a *FieldError", err, err)
			}
			if fe.Field != tt.wantField || !strings.Contains(fe.Reason, tt.wantReason) {
				t.Fatalf("err = field %q reason %q; want field %q reason containing %q", fe.Field, fe.Reason, tt.wantField, tt.wantReason)
			}
		})
	}
}

func TestDecodeAdjustment(t *testing.T) {
	tests := []struct {
		name, body string
		want       shop.Adjustment
		wantField  string
		wantReason string
	}{
		{"valid", `{"adjustmentId":"adj-1","sku":"MUG-RED-350","delta":25,"reason":"restock"}`, shop.Adjustment{AdjustmentID: "adj-1", SKU: "MUG-RED-350", Delta: 25, Reason: "restock"}, "", ""},
		{"negative, no reason", `{"adjustmentId":"adj-2","sku":"A","delta":-3}`, shop.Adjustment{AdjustmentID: "adj-2", SKU: "A", Delta: -3}, "", ""},
		{"delta as word", `{"adjustmentId":"a","sku":"A","delta":"twelve"}`, shop.Adjustment{}, "delta", "must be an integer in range, got string"},
		{"delta zero", `{"adjustmentId":"a","sku":"A","delta":0}`, shop.Adjustment{}, "delta", "must not be 0"},
		{"delta twice in two cases", `{"adjustmentId":"adj-1","sku":"A","delta":-5,"DELTA":500}`, shop.Adjustment{}, "delta", "more than once"},
		{"delta huge", `{"adjustmentId":"a","sku":"A","delta":1000001}`, shop.Adjustment{}, "delta", "between"},
		{"missing delta", `{"adjustmentId":"a","sku":"A"}`, shop.Adjustment{}, "delta", "is required"},
		{"missing sku", `{"adjustmentId":"a","delta":1}`, shop.Adjustment{}, "sku", "is required"},
		{"missing id", `{"sku":"A","delta":1}`, shop.Adjustment{}, "adjustmentId", "is required"},
		{"unknown field ignored", `{"adjustmentId":"a","sku":"A","delta":1,"warehouse":{"id":7}}`, shop.Adjustment{AdjustmentID: "a", SKU: "A", Delta: 1}, "", ""},
		{"unknown field does not hide a bad value", `{"adjustmentId":"a","sku":"A","delta":0,"warehouse":"x"}`, shop.Adjustment{}, "delta", "must not be 0"},
		{"adjustmentId with a lone surrogate", `{"adjustmentId":"adj-\udfff","sku":"A","delta":1}`, shop.Adjustment{}, "adjustmentId", "unpaired UTF-16 surrogate"},
		{"reason with a lone surrogate", `{"adjustmentId":"a","sku":"A","delta":1,"reason":"\ud800"}`, shop.Adjustment{}, "reason", "unpaired UTF-16 surrogate"},
		{"reason control", `{"adjustmentId":"a","sku":"A","delta":1,"reason":"a\nb"}`, shop.Adjustment{}, "reason", "control"},
		{"reason too long", `{"adjustmentId":"a","sku":"A","delta":1,"reason":"` + strings.Repeat("r", 257) + `"}`, shop.Adjustment{}, "reason", "at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := shop.DecodeAdjustment([]byte(tt.body))
			if tt.wantReason == "" {
				if err != nil || got != tt.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
				}
				return
			}
			var fe *shop.FieldError
			if !errors.As(err, &fe) || fe.Field != tt.wantField || !strings.Contains(fe.Reason, tt.wantReason) {
				t.Fatalf("err = %v; want field %q reason containing %q", err, tt.wantField, tt.wantReason)
			}
		})
	}
}

// TestDecodeReportsIgnoredFields: forward compatibility — fields a newer producer adds are
// accepted, and reported by JSON path so that the handler can log them.
func TestDecodeReportsIgnoredFields(t *testing.T) {
	o, ignored, err := shop.DecodeOrderFields([]byte(`{"orderId":"o","customerId":"c","channel":"web",` +
		`"lines":[{"sku":"A","qty":1},{"sku":"B","qty":2,"giftWrap":true,"note":{"x":[1]}}],"Coupon":null}`))
	if err != nil || len(o.Lines) != 2 {
		t.Fatalf("DecodeOrderFields: %+v, %v", o, err)
	}
	if want := []string{"Coupon", "channel", "lines[1].giftWrap", "lines[1].note"}; !reflect.DeepEqual(ignored, want) {
		t.Errorf("ignored = %q, want %q", ignored, want)
	}
	// encoding/json matches names without regard to case: "OrderID" is orderId, not ignored.
	if _, ignored, err := shop.DecodeOrderFields([]byte(`{"OrderID":"o","customerId":"c","lines":[{"SKU":"A","qty":1}]}`)); err != nil || len(ignored) != 0 {
		t.Errorf("case-insensitive names: ignored %q, err %v", ignored, err)
	}
	a, ignored, err := shop.DecodeAdjustmentFields([]byte(`{"adjustmentId":"a","sku":"A","delta":-1,"warehouse":"w1","source":{"system":"wms"}}`))
	if err != nil || a.Delta != -1 {
		t.Fatalf("DecodeAdjustmentFields: %+v, %v", a, err)
	}
	if want := []string{"source", "warehouse"}; !reflect.DeepEqual(ignored, want) {
		t.Errorf("ignored = %q, want %q", ignored, want)
	}
	if _, ignored, err := shop.DecodeAdjustmentFields([]byte(`{"adjustmentId":"a","sku":"A","delta":1}`)); err != nil || ignored != nil {
		t.Errorf("no unknown fields: ignored %q, err %v", ignored, err)
	}
}

// FuzzDecodeOrder: DecodeOrder never panics; it accepts exactly what re-validates, and
// every rejection is a *FieldError.
func FuzzDecodeOrder(f *testing.F) {
	for _, s := range []string{
		`{"orderId":"ord-1001","customerId":"cus-4711","lines":[{"sku":"MUG-RED-350","qty":2},{"sku":"TEE-BLK-M","qty":1}]}`,
		`{"orderId": "ord-4002", "customerId": "cus-0501", "lines": [{"sku": "MUG-RED-350", "qty": 1}`,
		`{"orderId":"o","lines":[{"sku":"A","qty":0}]}`,
		`{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1},{"sku":"A","qty":1}]}`,
		`{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1e400}]}`,
		`{"orderId":"\ud800","customerId":"c","lines":null}`,
		`{"orderId":"o","customerId":"c","lines":[{"sku":"A","qty":1,"extra":[{}]}],"v2":{"a":1}}`,
		``, `null`, `[]`, `{}`, `{"lines":[[]]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		o, ignored, err := shop.DecodeOrderFields(body)
		for _, p := range ignored {
			for _, k := range []string{"orderId", "customerId", "lines"} {
				if strings.EqualFold(p, k) {
					t.Fatalf("known field %q reported as ignored (%q)", p, ignored)
				}
			}
		}
		if err != nil {
			var fe *shop.FieldError
			if !errors.As(err, &fe) || !errors.Is(err, shop.ErrInvalid) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			return
		}
		if err := o.Validate(); err != nil {
			t.Fatalf("decoded order does not validate: %v", err)
		}
		b, _ := json.Marshal(o)
		again, err := shop.DecodeOrder(b)
		if err != nil || !reflect.DeepEqual(again, o) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, o)
		}
	})
}

// FuzzDecodeAdjustment: DecodeAdjustment never panics and round-trips what it accepts.
func FuzzDecodeAdjustment(f *testing.F) {
	for _, s := range []string{
		`{"adjustmentId":"adj-20251120-0001","sku":"MUG-RED-350","delta":25,"reason":"restock"}`,
		`{"adjustmentId":"adj-20251120-0002","delta":"twelve","reason":"cycle count"}`,
		`{"adjustmentId":"a","sku":"A","delta":-9223372036854775808}`,
		`{"adjustmentId":"a","sku":"A","delta":1,"reason":null}`,
		`{"adjustmentId":"a","sku":"A","delta":1,"warehouse":"w","v":[1,{"x":null}]}`,
		``, `{`, `{"sku":{}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		a, err := shop.DecodeAdjustment(body)
		if err != nil {
			var fe *shop.FieldError
			if !errors.As(err, &fe) {
				t.Fatalf("error %v (%T) is not a *FieldError", err, err)
			}
			return
		}
		b, _ := json.Marshal(a)
		again, err := shop.DecodeAdjustment(b)
		if err != nil || again != a {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, a)
		}
	})
}

// Validate of a value built in code sees invalid UTF-8, which json.Marshal would have
// replaced with U+FFFD before the decoder's checks.
func TestValidateInvalidUTF8(t *testing.T) {
	o := shop.Order{OrderID: "o-\xff", CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}
	var fe *shop.FieldError
	if err := o.Validate(); !errors.As(err, &fe) || fe.Field != "orderId" {
		t.Errorf("order: err = %v; want a *FieldError naming orderId", err)
	}
	a := shop.Adjustment{AdjustmentID: "a", SKU: "A", Delta: 1, Reason: "r\xc3"}
	if err := a.Validate(); !errors.As(err, &fe) || fe.Field != "reason" {
		t.Errorf("adjustment: err = %v; want a *FieldError naming reason", err)
	}
}
