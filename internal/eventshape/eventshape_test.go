package eventshape_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/turnstile-locks/turnstile/internal/eventshape"
)

func TestClassifyEventFiles(t *testing.T) {
	want := map[string]eventshape.Kind{
		"sqs-order.json":                            eventshape.SQS,
		"sqs-order-batch.json":                      eventshape.SQS,
		"sqs-order-duplicate.json":                  eventshape.SQS,
		"sqs-order-malformed.json":                  eventshape.SQS,
		"eventbridge-stock-adjusted.json":           eventshape.EventBridge,
		"eventbridge-stock-adjusted-malformed.json": eventshape.EventBridge,
		"scheduled-sweep.json":                      eventshape.Scheduled,
		"dynamodb-ttl-remove.json":                  eventshape.DynamoDBStream,
		"dynamodb-user-remove.json":                 eventshape.DynamoDBStream,
	}
	files, err := filepath.Glob(filepath.Join("..", "..", "events", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	seen := 0
	for _, f := range files {
		k, ok := want[filepath.Base(f)]
		if !ok {
			continue // e.g. seed files: not events
		}
		seen++
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got := eventshape.Classify(b); got.Kind != k {
			t.Errorf("%s: %s (%s), want %s", filepath.Base(f), got.Kind, got, k)
		}
	}
	if seen != len(want) {
		t.Errorf("found %d of the %d event files", seen, len(want))
	}
}

func TestClassify(t *testing.T) {
	tests := []struct {
		payload string
		kind    eventshape.Kind
		text    string
	}{
		{``, eventshape.Empty, "an empty event"},
		{" null ", eventshape.Empty, "an empty event"},
		{`{}`, eventshape.Empty, "an empty event"},
		{`{"Records":[]}`, eventshape.Empty, "an empty event"},
		{`{"Records":[`, eventshape.NotJSON, "not valid JSON"},
		{`[1,2]`, eventshape.NotObject, "not an object"},
		{`"x"`, eventshape.NotObject, "not an object"},
		{`{"Records":[{"messageId":"m","eventSource":"aws:sqs"},{"messageId":"n","eventSource":"aws:sqs"}]}`, eventshape.SQS, "an SQS batch of 2 records"},
		{`{"Records":[{"eventSource":"aws:dynamodb"}]}`, eventshape.DynamoDBStream, "a DynamoDB stream batch of 1 record"},
		{`{"Records":[{"EventSource":"aws:sns"}]}`, eventshape.SNS, "SNS"},
		{`{"Records":[{"eventSource":"aws:sqs"},{"eventSource":"aws:dynamodb"}]}`, eventshape.MixedRecords, `"aws:sqs", "aws:dynamodb"`},
		{`{"Records":[{"messageId":"m"}]}`, eventshape.MixedRecords, `eventSource ""`},
		{`{"Records":[7]}`, eventshape.MixedRecords, "not an array of objects"},
		{`{"Records":{}}`, eventshape.MixedRecords, "not an array of objects"},
		{`{"id":"e1","detail-type":"StockAdjusted","source":"turnstile.inventory","detail":{}}`, eventshape.EventBridge,
			`an EventBridge event (detail-type "StockAdjusted", source "turnstile.inventory")`},
		{`{"id":7,"detail-type":"Scheduled Event","source":"aws.events","detail":{}}`, eventshape.Scheduled, "schedule"},
		{`{"detail-type":"Scheduled Event","source":"my.app","detail":{}}`, eventshape.EventBridge, "EventBridge event"},
		{`{"orderId":"o","lines":[]}`, eventshape.Unknown, `keys "lines", "orderId"`},
	}
	for _, tt := range tests {
		got := eventshape.Classify([]byte(tt.payload))
		if got.Kind != tt.kind || !strings.Contains(got.String(), tt.text) {
			t.Errorf("Classify(%s) = %s %q, want %s and a text containing %q", tt.payload, got.Kind, got, tt.kind, tt.text)
		}
	}
	if s := eventshape.Classify([]byte(`{"id":"e9","detail-type":"X","source":"s","detail":1}`)); s.ID != "e9" {
		t.Errorf("ID = %q", s.ID)
	}
}

func TestTriggerKinds(t *testing.T) {
	for typ, want := range map[string][]eventshape.Kind{
		"SQS":             {eventshape.SQS},
		"DynamoDB":        {eventshape.DynamoDBStream},
		"EventBridgeRule": {eventshape.EventBridge, eventshape.Scheduled},
		"Schedule":        {eventshape.Scheduled},
		"Api":             nil,
	} {
		if got := eventshape.TriggerKinds(typ); !reflect.DeepEqual(got, want) {
			t.Errorf("TriggerKinds(%s) = %v, want %v", typ, got, want)
		}
	}
}

func TestInvalidEventError(t *testing.T) {
	e := &eventshape.InvalidEventError{Function: "orderprocessor", Got: "an empty event", Want: "an SQS batch"}
	if got, want := e.Error(), "orderprocessor: got an empty event; want an SQS batch"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
	cause := errors.New("detail.delta: must not be 0")
	e = &eventshape.InvalidEventError{Function: "inventoryupdater", EventID: "e1", Err: cause}
	if got, want := e.Error(), "inventoryupdater: event e1: detail.delta: must not be 0"; got != want || !errors.Is(e, cause) {
		t.Errorf("Error() = %q, want %q (and to wrap the cause)", got, want)
	}
	// Lambda's errorType is the type's name.
	if name := reflect.TypeOf(e).Elem().Name(); name != "InvalidEventError" {
		t.Errorf("type name %q", name)
	}
}

func FuzzClassify(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"Records":[{"eventSource":"aws:sqs"}]}`, `{"detail-type":"x","source":"y","detail":{}}`, `{"Records":[null]}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s := eventshape.Classify(b)
		if s.Kind == "" || s.String() == "" {
			t.Fatalf("Classify(%q) = %+v", b, s)
		}
	})
}
