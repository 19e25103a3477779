package handler_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
)

// noOrders is an Orders that knows every order as pending, so that the fuzzer reaches
// the re-drive path without a database.
type noOrders struct{}

func (noOrders) Order(_ context.Context, id string) (shop.Order, shop.Status, bool, error) {
	return shop.Order{OrderID: id, CustomerID: "c", Lines: []shop.Line{{SKU: "A", Qty: 1}}}, shop.StatusPending, true, nil
}

// FuzzJanitorRecord feeds arbitrary stream records to DecodeRecord and to the handler's
// stream path: neither may panic (aws-lambda-go's attribute accessors panic on a type
// mismatch), and a decoded lease must be a held lock row.
func FuzzJanitorRecord(f *testing.F) {
	for _, name := range []string{"dynamodb-ttl-remove.json", "dynamodb-user-remove.json"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "..", "events", name))
		if err != nil {
			f.Fatal(err)
		}
		var ev struct {
			Records []json.RawMessage `json:"Records"`
		}
		if err := json.Unmarshal(b, &ev); err != nil {
			f.Fatal(err)
		}
		for _, r := range ev.Records {
			f.Add([]byte(r))
		}
	}
	ttl := `{"eventName":"REMOVE","userIdentity":{"type":"Service","principalId":"dynamodb.amazonaws.com"},"dynamodb":{"SequenceNumber":"1","OldImage":%s}}`
	for _, img := range []string{
		`{"pk":{"S":"sku#MUG"},"sk":{"S":"lock"},"state":{"S":"held"},"data":{"B":"b3JkLTE="},"until":{"N":"1763630100000"}}`,
		`{"pk":{"S":"order#ord-1"},"sk":{"S":"lock"},"state":{"S":"held"}}`,
		`{"pk":{"N":"1"},"sk":{"S":"lock"},"state":{"S":"held"}}`,
		`{"pk":{"S":"sku#X"},"sk":{"S":"lock"},"state":{"N":"1"},"data":{"N":"5"},"until":{"S":"x"}}`,
		`{"pk":{"S":"sku#X"},"sk":{"S":"lock"},"state":{"S":"held"},"data":{"L":[{"S":"a"}]}}`,
		`{"pk":{"S":"sku#MUG"},"sk":{"S":"lock"},"state":{"S":"fair"},"fence":{"N":"3"},"serving":{"N":"2"},"w#0a1b":{"N":"2"},"d#0a1b":{"L":[{"S":"w"},{"N":"3000"},{"B":"b3JkLTE="}]},"hFor":{"N":"2"},"hUntil":{"N":"1763630100000"}}`,
		`{"pk":{"S":"sku#MUG"},"sk":{"S":"lock"},"state":{"S":"fair"},"fence":{"N":"2"},"serving":{"N":"2"},"w#0a1b":{"S":"x1"},"d#0a1b":{"L":[{"N":"1"},{"S":"x"}]}}`,
		`{"pk":{"S":"sku#MUG"},"sk":{"S":"lock"},"state":{"S":"fair"},"fence":{"N":"3"},"serving":{"N":"2"},"leaseMs":{"N":"3000"},"w#0a1b":{"N":"2"},"d#0a1b":{"B":"b3JkLTE="},"hFor":{"N":"2"},"hOwner":{"S":"w"},"hUntil":{"N":"1763630100000"}}`,
		`{"pk":{"S":"sku#MUG"},"sk":{"S":"lock"},"state":{"S":"fair"},"fence":{"N":"2"},"serving":{"N":"2"},"w#0a1b":{"N":"2"},"d#0a1b":{"S":"x"},"hFor":{"N":"2"},"hOwner":{"N":"1"}}`,
		`{"pk":{"NULL":true},"sk":{"BOOL":true}}`,
		`null`,
	} {
		f.Add([]byte(fmt.Sprintf(ttl, img)))
	}
	f.Add([]byte(`{"eventName":"REMOVE","userIdentity":null}`))
	f.Add([]byte(`{`))

	h := handler.New((*dynamodb.Client)(nil), "locks", noOrders{},
		handler.RedriverFunc(func(context.Context, shop.Order) error { return nil }),
		handler.WithLogger(slog.New(slog.DiscardHandler)), handler.WithMetrics(nil))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var rec events.DynamoDBEventRecord
		if json.Unmarshal(raw, &rec) == nil {
			l, ok, err := handler.DecodeRecord(rec)
			switch {
			case err != nil && !errors.Is(err, handler.ErrMalformedRecord):
				t.Fatalf("error %v does not match ErrMalformedRecord", err)
			case ok && (err != nil || l.Key == "" || l.Namespace == "" || !handler.IsTTLDeletion(rec)):
				t.Fatalf("decoded %+v, %v from a record that is not a TTL-removed lock row", l, err)
			}
		}
		batch := append(append([]byte(`{"Records":[`), raw...), []byte(`]}`)...)
		_, _ = h.Handle(context.Background(), batch)
	})
}
