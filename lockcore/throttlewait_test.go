package lockcore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// throttledWrites refuses every write while on, as a throttled table does.
type throttledWrites struct {
	lockcore.DynamoDB
	on      atomic.Bool
	refused atomic.Int32
}

func (f *throttledWrites) refuse() error {
	f.refused.Add(1)
	return &types.ProvisionedThroughputExceededException{Message: aws.String("throttled (test)")}
}

func (f *throttledWrites) UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, o ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	if f.on.Load() {
		return nil, f.refuse()
	}
	return f.DynamoDB.UpdateItem(ctx, in, o...)
}

func (f *throttledWrites) PutItem(ctx context.Context, in *dynamodb.PutItemInput, o ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	if f.on.Load() {
		return nil, f.refuse()
	}
	return f.DynamoDB.PutItem(ctx, in, o...)
}

func (f *throttledWrites) TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, o ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	if f.on.Load() {
		return nil, f.refuse()
	}
	return f.DynamoDB.TransactWriteItems(ctx, in, o...)
}

// A wait policy bounds an acquisition also when the table throttles it: Acquire with
// WaitUpTo(d) (or NoWait) on a table that refuses every write returns soon after d with
// the throttling error, rather than retrying until the context ends — in a Lambda that
// is the invocation's deadline, and the time the caller kept for its cleanup after the
// wait is gone (found by review).
func TestThrottledTakeKeepsToTheWaitPolicy(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	for _, tc := range []struct {
		name    string
		acquire func(ctx context.Context, db lockcore.DynamoDB, wait lockcore.WaitPolicy) error
	}{
		{"mutex", func(ctx context.Context, db lockcore.DynamoDB, wait lockcore.WaitPolicy) error {
			m, err := lockcore.NewMutex(db, e.locks, fast("m")...)
			if err != nil {
				return err
			}
			_, err = m.Acquire(ctx, "thr-mutex", wait)
			return err
		}},
		{"ticket", func(ctx context.Context, db lockcore.DynamoDB, wait lockcore.WaitPolicy) error {
			tl, err := lockcore.NewTicketLock(db, e.locks, fast("t")...)
			if err != nil {
				return err
			}
			_, err = tl.Acquire(ctx, "thr-ticket", wait)
			return err
		}},
		{"queue", func(ctx context.Context, db lockcore.DynamoDB, wait lockcore.WaitPolicy) error {
			q, err := lockcore.NewQueue(db, e.locks, fast("q")...)
			if err != nil {
				return err
			}
			_, err = q.Acquire(ctx, "thr-queue", wait)
			return err
		}},
		{"item", func(ctx context.Context, db lockcore.DynamoDB, wait lockcore.WaitPolicy) error {
			il, err := lockcore.NewItemLocker(db, e.data, fast("i")...)
			if err != nil {
				return err
			}
			_, err = il.Acquire(ctx, dataKey("thr-item"), wait)
			return err
		}},
	} {
		for _, wait := range []struct {
			name   string
			policy lockcore.WaitPolicy
		}{{"bounded", lockcore.WaitUpTo(300 * time.Millisecond)}, {"nowait", lockcore.NoWait()}} {
			t.Run(tc.name+"/"+wait.name, func(t *testing.T) {
				t.Parallel()
				f := &throttledWrites{DynamoDB: e.db}
				f.on.Store(true)
				ctx := ctxT(t, 10*time.Second)
				start := time.Now()
				err := tc.acquire(ctx, f, wait.policy)
				took := time.Since(start)
				if err == nil {
					t.Fatal("acquired on a table refusing every write")
				}
				if took > 3*time.Second {
					t.Errorf("returned after %s (%d refused writes): the wait policy did not bound it (%v)", took, f.refused.Load(), err)
				}
				var tx *types.ProvisionedThroughputExceededException
				if !errors.As(err, &tx) {
					t.Errorf("error %v does not wrap the throttling", err)
				}
			})
		}
	}
}
