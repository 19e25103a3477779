package stack

import (
	"testing"
)

// TestOrderProcessorRetriesAndScaling: the order processor may shorten the visibility of
// the messages it returns (sqs:ChangeMessageVisibility on the orders queue only, the queue
// named by its ORDERS_QUEUE_URL), and its SQS event source caps its concurrency
// (ScalingConfig.MaximumConcurrency, at least SQS's minimum of 2) so that a flash sale on a
// few hot SKUs does not fan out into invocations that only wait.
func TestOrderProcessorRetriesAndScaling(t *testing.T) {
	tpl, _ := load(t)
	f, err := LookupFunction(tpl, "OrderProcessorFunction")
	if err != nil {
		t.Fatal(err)
	}
	refs, err := References(f.Environment()["ORDERS_QUEUE_URL"], "ORDERS_QUEUE_URL")
	if err != nil || len(refs) != 1 || refs[0].Target != "OrdersQueue" || refs[0].Kind != "Ref" {
		t.Fatalf("ORDERS_QUEUE_URL = %v (%v), want !Ref OrdersQueue", f.Environment()["ORDERS_QUEUE_URL"], err)
	}
	grants, err := FunctionGrants(tpl, f)
	if err != nil {
		t.Fatal(err)
	}
	cmv := false
	for _, g := range grants {
		if g.Action != "sqs:ChangeMessageVisibility" {
			continue
		}
		if g.Target != "OrdersQueue" || g.Attribute != "Arn" {
			t.Errorf("%s: sqs:ChangeMessageVisibility on %s.%s, want the orders queue's ARN only", g.Path, g.Target, g.Attribute)
		}
		cmv = true
	}
	if !cmv {
		t.Error("the role does not grant sqs:ChangeMessageVisibility on the orders queue")
	}
	ev, ok := f.Events()["Orders"]
	if !ok || ev.Type != "SQS" {
		t.Fatalf("no SQS event source Orders: %+v", f.Events())
	}
	sc, _ := ev.Properties["ScalingConfig"].(map[string]any)
	n, ok := sc["MaximumConcurrency"].(int)
	if !ok || n < 2 || n > 1000 {
		t.Errorf("ScalingConfig.MaximumConcurrency = %v, want 2..1000", sc["MaximumConcurrency"])
	}
}
