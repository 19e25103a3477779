package demo

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// The simulated queue as the order processor's handler sees it: ChangeMessageVisibility
// brings a returned message back after the given delay instead of the visibility timeout,
// and a message that fails every receive (poison) is dead-lettered after exactly
// maxReceiveCount receives, however short its visibility was made.
func TestQueueVisibilityAndRedrive(t *testing.T) {
	q := newQueue("q", region, time.Hour, 5)
	q.send(`not json`, sendOptions{})
	ctx := context.Background()
	receives := 0
	for i := 0; i < 10; i++ {
		rctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		batch := q.receive(rctx, 10, 0, notFreshCrash)
		cancel()
		if len(batch) == 0 {
			break
		}
		receives++
		m := batch[0].msg
		if m.Attributes["ApproximateReceiveCount"] != string(rune('0'+receives)) {
			t.Errorf("receive %d: ApproximateReceiveCount %s", receives, m.Attributes["ApproximateReceiveCount"])
		}
		// The handler returns it with a 0 s delay (the visibility timeout is an hour).
		if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
			QueueUrl: aws.String(q.url()), ReceiptHandle: aws.String(m.ReceiptHandle), VisibilityTimeout: 0,
		}); err != nil {
			t.Fatal(err)
		}
	}
	_, dead := q.finished()
	if receives != 5 || len(dead) != 1 || dead[0].receives != 5 {
		t.Fatalf("received %d times, dead-lettered %d (receives %v); want 5 receives, then the DLQ", receives, len(dead), dead)
	}
	if _, err := q.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{QueueUrl: aws.String("https://elsewhere"), ReceiptHandle: aws.String("x")}); err == nil {
		t.Error("ChangeMessageVisibility on another queue's URL succeeded")
	}
}
