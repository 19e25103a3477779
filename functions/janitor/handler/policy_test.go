package handler_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/shop"
	"github.com/turnstile-locks/turnstile/internal/stack"
	"github.com/turnstile-locks/turnstile/internal/testenv"
)

// sqsRecorder stands in for SQS (not DynamoDB): it keeps the messages and records the
// call for the policy check.
type sqsRecorder struct {
	mu   sync.Mutex
	sent []*sqs.SendMessageInput
}

func (s *sqsRecorder) SendMessage(_ context.Context, in *sqs.SendMessageInput, _ ...func(*sqs.Options)) (*sqs.SendMessageOutput, error) {
	calls.Record("sqs:SendMessage", aws.ToString(in.QueueUrl))
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, in)
	return &sqs.SendMessageOutput{MessageId: aws.String("m-1")}, nil
}

// The re-drive as deployed: SQSRedriver sends the abandoned order to ORDERS_QUEUE_URL, the
// function's environment's !Ref OrdersQueue.
func TestRedriveSendsTheOrderToTheOrdersQueue(t *testing.T) {
	fn, err := stack.LookupFunction(testenv.Template(t), "JanitorFunction")
	if err != nil {
		t.Fatal(err)
	}
	vals, err := stack.Local{}.Values(testenv.Template(t))
	if err != nil {
		t.Fatal(err)
	}
	env, err := fn.ResolveEnvironment(vals)
	if err != nil {
		t.Fatal(err)
	}
	queueURL := env["ORDERS_QUEUE_URL"]
	if queueURL != vals.Refs["OrdersQueue"] {
		t.Fatalf("ORDERS_QUEUE_URL = %q, want the OrdersQueue's URL %q", queueURL, vals.Refs["OrdersQueue"])
	}
	calls.Name(queueURL, "OrdersQueue")

	f := newFixture(t)
	f.crashOrder(t, shop.CrashStockLocked, crashed)
	img := f.lockRow(t, shop.SKULockKey("MUG-RED-350"))
	sender := &sqsRecorder{}
	j := handler.New(f.hdb, f.tables.Locks, f.hsvc, handler.SQSRedriver{Client: sender, QueueURL: queueURL},
		handler.WithLogger(slog.New(slog.DiscardHandler)))
	ctx := context.Background()
	resp, err := j.Handle(ctx, streamEvent(t, "dynamodb-ttl-remove.json", img))
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("Handle = %+v, %v", resp, err)
	}
	if len(sender.sent) != 1 || aws.ToString(sender.sent[0].QueueUrl) != queueURL {
		t.Fatalf("sent %d messages (%v), want one to %s", len(sender.sent), sender.sent, queueURL)
	}
	var got shop.Order
	if err := json.Unmarshal([]byte(aws.ToString(sender.sent[0].MessageBody)), &got); err != nil {
		t.Fatal(err)
	}
	if got.OrderID != crashed.OrderID || !slices.Equal(got.Lines, crashed.Lines) {
		t.Errorf("re-driven body = %+v, want %+v", got, crashed)
	}
}
