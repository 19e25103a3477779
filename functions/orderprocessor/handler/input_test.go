package handler_test

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"
)

// Two different orders whose ids differ only in an unpaired UTF-16 surrogate escape
// (what JavaScript's JSON.stringify writes for a string cut in the middle of a surrogate
// pair). encoding/json decodes both escapes to U+FFFD, so both became the order
// "ord-\uFFFD": the second message was acknowledged as a duplicate of the first and its
// order never decided (found by review). Each must be returned as malformed, naming
// orderId, and nothing stored.
func TestOrderIDWithUnpairedSurrogateIsMalformed(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"MUG-RED-350": 5})
	body := func(esc string) string {
		return `{"orderId":"ord-` + esc + `","customerId":"c-1","lines":[{"sku":"MUG-RED-350","qty":1}]}`
	}
	ev := events.SQSEvent{Records: []events.SQSMessage{
		orderMessage(1, body(`\ud800`)),
		orderMessage(2, body(`\udc00`)),
	}}
	failed := f.invoke(t, ev)
	if want := []string{messageID(ev, 0), messageID(ev, 1)}; !slices.Equal(failed, want) {
		t.Fatalf("failures = %v, want both messages returned as malformed (%v)\nlogs:\n%s", failed, want, f.logs)
	}
	for i := range ev.Records {
		line := lineWith(f.logs.String(), messageID(ev, i))
		if !strings.Contains(line, `"level":"ERROR"`) || !strings.Contains(line, `"field":"orderId"`) {
			t.Errorf("log of message %d = %s; want ERROR naming orderId", i, line)
		}
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{5, 0} {
		t.Errorf("MUG stock = %v, want untouched", got)
	}
	var replaced string
	_ = json.Unmarshal([]byte(`"ord-\ud800"`), &replaced)
	if _, ok, _ := f.svc.OrderStatus(t.Context(), replaced); ok {
		t.Errorf("order %q was stored", replaced)
	}
}
