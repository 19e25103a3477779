package handler_test

import (
	"encoding/json"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/testenv"
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

// Two messages of one batch with the same order id and different content (a producer
// reusing an id): the first version is decided and the second acknowledged as its
// duplicate — as for a redelivery in a later batch, where prepareOrder logs a warning.
// In one batch the second copy was acknowledged without one (found by review): the only
// trace of the other content was an INFO "order processed" with duplicate true.
func TestSameOrderIDWithOtherContentInOneBatchIsReported(t *testing.T) {
	f := newFixture(t)
	f.seed(t, map[string]int{"MUG-RED-350": 5, "TEE-BLK-M": 5})
	svc, err := shop.NewService(testenv.Client(t), f.tables, shop.WithOwner("orderprocessor-content"),
		shop.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))))
	if err != nil {
		t.Fatal(err)
	}
	f.h = handler.New(svc, handler.WithLogger(slog.New(slog.NewJSONHandler(f.logs, nil))), handler.WithMetrics(nil))
	ev := events.SQSEvent{Records: []events.SQSMessage{
		orderMessage(1, `{"orderId":"same-1","customerId":"c-1","lines":[{"sku":"MUG-RED-350","qty":1}]}`),
		orderMessage(2, `{"orderId":"same-1","customerId":"c-1","lines":[{"sku":"TEE-BLK-M","qty":3}]}`),
	}}
	if failed := f.invoke(t, ev); len(failed) != 0 {
		t.Fatalf("failures = %v\n%s", failed, f.logs)
	}
	if got := f.stock(t, "MUG-RED-350"); got != [2]int{4, 1} {
		t.Errorf("MUG stock = %v, want the first version reserved", got)
	}
	if got := f.stock(t, "TEE-BLK-M"); got != [2]int{5, 0} {
		t.Errorf("TEE stock = %v, want the second version not reserved", got)
	}
	var warned bool
	for _, l := range strings.Split(f.logs.String(), "\n") {
		warned = warned || strings.Contains(l, `"level":"WARN"`) && strings.Contains(l, "different content") && strings.Contains(l, `"orderId":"same-1"`)
	}
	if !warned {
		t.Errorf("no WARN naming the order delivered with different content:\n%s", f.logs)
	}
}
