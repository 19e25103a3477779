package lockcore_test

import (
	"context"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// A Queue waiter that dies while queued is evicted while the holder still holds, not when
// its turn comes: waiters read only the head of the queue per poll (4 rows), but every row
// ahead of them once a lease, and so watch a dead row's heartbeat stop wherever it is.
func TestQueueDeadWaiterEvictedBeforeItsTurn(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	const lease = time.Second
	opts := func(owner string) []lockcore.Option {
		return fast(owner, lockcore.WithMinLease(lease), lockcore.WithLease(lease))
	}
	holder, _ := lockcore.NewQueue(e.db, e.locks, opts("holder")...)
	h, err := holder.Acquire(ctxT(t, 10*time.Second), "qdead")
	if err != nil {
		t.Fatal(err)
	}
	// Four live waiters ahead of the one that dies, so that it is past the rows a waiter
	// behind it reads per poll.
	live := make(chan error, 4)
	for i := 0; i < 4; i++ {
		q, _ := lockcore.NewQueue(e.db, e.locks, opts("live")...)
		go func() {
			l, err := q.Acquire(ctxT(t, 60*time.Second), "qdead", lockcore.WaitUpTo(40*time.Second))
			if err == nil {
				err = l.Release(context.Background())
			}
			live <- err
		}()
		time.Sleep(100 * time.Millisecond) // in this order
	}
	d := &cutOff{DynamoDB: e.db} // a process that crashes while queued
	deadQ, _ := lockcore.NewQueue(d, e.locks, opts("dead")...)
	go func() { _, _ = deadQ.Acquire(context.Background(), "qdead", lockcore.WaitUpTo(30*time.Second)) }()
	time.Sleep(300 * time.Millisecond) // its row is in the queue
	d.cut.Store(true)

	waiter, _ := lockcore.NewQueue(e.db, e.locks, opts("waiter")...)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctxT(t, 30*time.Second), "qdead", lockcore.WaitUpTo(20*time.Second))
		if err == nil {
			err = l.Release(context.Background())
		}
		got <- err
	}()
	// The holder holds for four leases: the waiter reads every row after one lease of
	// waiting, sees the dead row unchanged for a lease and evicts it.
	time.Sleep(4 * lease)
	out, err := e.db.Query(ctxT(t, 5*time.Second), &dynamodb.QueryInput{
		TableName:                 &e.locks,
		KeyConditionExpression:    aws.String("pk = :k"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":k": &types.AttributeValueMemberS{Value: "qdead"}},
		ConsistentRead:            aws.Bool(true),
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range out.Items {
		if o, ok := it["owner"].(*types.AttributeValueMemberS); ok && o.Value == "dead" {
			t.Errorf("the dead waiter's row is still queued after %s: %v", 4*lease, it["sk"])
		}
	}
	if err := h.Release(ctxT(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 4; i++ {
		if err := <-live; err != nil {
			t.Fatal(err)
		}
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
}
