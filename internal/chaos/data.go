package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Counter items live in the inventory table (pk/sk strings):
//
//	pk "chaos#<strategy>#<k>", sk "STOCK"
//	n           the counter
//	lastOp      id of the increment that wrote n
//	fence       highest fencing token seen (lease mutex, queue, multi-key)
//	fenceLease  lease id that set fence
//
// Lock rows of the lease mutex and the queue use lock key "chaos-<strategy>-<k>".
const (
	attrN          = "n"
	attrLast       = "lastOp"
	attrFence      = "fence"
	attrFenceLease = "fenceLease"
	// attrAdds counts the locking read's writes with ADD: each write sets n = N+1 and adds
	// 1 here, so a write applied twice (a retried or late duplicate) leaves adds > n.
	attrAdds = "adds"
)

func itemKey(strategy string, k int) map[string]types.AttributeValue {
	return map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: fmt.Sprintf("chaos#%s#%d", strategy, k)},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
}

func lockKey(strategy string, k int) string { return fmt.Sprintf("chaos-%s-%d", strategy, k) }

func partName(strategy string, k int) string { return fmt.Sprintf("%s/%d", strategy, k) }

// obs is what a read saw of a counter item.
type obs struct {
	N    int64
	Last string
	Adds int64 // attrAdds (locking-read items only)
}

func obsOf(it map[string]types.AttributeValue) obs {
	var o obs
	if v, ok := it[attrN].(*types.AttributeValueMemberN); ok {
		o.N, _ = strconv.ParseInt(v.Value, 10, 64)
	}
	if v, ok := it[attrLast].(*types.AttributeValueMemberS); ok {
		o.Last = v.Value
	}
	o.Adds, _ = numAttr(it, attrAdds)
	return o
}

func numAttr(it map[string]types.AttributeValue, name string) (int64, bool) {
	v, ok := it[name].(*types.AttributeValueMemberN)
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(v.Value, 10, 64)
	return n, err == nil
}

func strAttr(it map[string]types.AttributeValue, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

// errClass classifies a failed call for the harness's own writes, with the same rules
// lockcore documents for its writes.
type errClass int

const (
	clsRefused   errClass = iota // a condition failed: nothing written
	clsRetryable                 // throttled or never sent: nothing written
	clsAmbiguous                 // may have been applied
	clsFatal                     // a bug in the harness (validation error...)
)

func classify(err error) errClass {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return clsRefused
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return clsRefused
			}
		}
		return clsRetryable
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"TransactionConflictException", "TransactionInProgressException":
			return clsRetryable
		}
		if api.ErrorFault() == smithy.FaultClient {
			return clsFatal
		}
		return clsAmbiguous
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return clsRetryable
	}
	return clsAmbiguous
}

// noRetry turns the SDK's retries off: the harness retries its writes itself, knowing
// which attempts may have landed.
func noRetry(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// Timeouts of the harness's own calls. A call timeout shorter than the proxy's stall
// makes stalled writes time out on the client and land later.
const (
	callTimeout   = time.Second
	writeAttempts = 6
)

// writeResult is the outcome of a write the harness retried itself.
type writeResult struct {
	Status   opStatus
	Err      error // last error
	Ambig    bool  // an attempt may have landed
	Refusal  error // the condition failure, when refused
	Attempts int
}

// retryWrite runs call until it succeeds, is refused, or runs out of attempts. A refusal
// after an attempt that may have landed makes the outcome unknown: the earlier attempt
// may have been applied before the condition started to fail.
func retryWrite(ctx context.Context, rng *rand.Rand, call func(ctx context.Context) error) writeResult {
	var res writeResult
	backoff := 5 * time.Millisecond
	for res.Attempts < writeAttempts && ctx.Err() == nil {
		res.Attempts++
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		err := call(cctx)
		cancel()
		if err == nil {
			res.Status, res.Err = stOK, nil
			return res
		}
		res.Err = err
		switch classify(err) {
		case clsRefused:
			res.Refusal = err
			if res.Ambig {
				res.Status = stUnknown
			} else {
				res.Status = stFailed
			}
			return res
		case clsFatal:
			res.Status = stFailed
			if res.Ambig {
				res.Status = stUnknown
			}
			return res
		case clsAmbiguous:
			res.Ambig = true
		}
		t := time.NewTimer(time.Duration(rng.Int64N(int64(backoff))) + time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
		backoff = min(2*backoff, 200*time.Millisecond)
	}
	if res.Ambig {
		res.Status = stUnknown
	} else {
		res.Status = stFailed
	}
	return res
}

// dataClient does the harness's own data operations.
type dataClient struct {
	db    *dynamodb.Client
	table string
}

// fencedRead registers token at the item and returns the item as it was: the read of a
// read-modify-write under a lease mutex or queue lease.
//
// Fencing only the write is not enough for a read-modify-write: a paused holder (token
// 5) that read n, and a newer holder (token 6) that read the same n, could both write
// n+1 if the newer one had not yet written when the old one woke up. Registering the
// token at the read closes that window: once the newer holder has read, the older one
// can no longer write.
func (d *dataClient) fencedRead(ctx context.Context, rng *rand.Rand, key map[string]types.AttributeValue, token lockcore.Fence, leaseID string) (old map[string]types.AttributeValue, res writeResult) {
	ex, err := expression.NewBuilder().
		WithCondition(lockcore.FenceCondition(attrFence, token)).
		WithUpdate(lockcore.FenceUpdate(expression.Set(expression.Name(attrFenceLease), expression.Value(leaseID)), attrFence, token)).
		Build()
	if err != nil {
		panic(err)
	}
	res = retryWrite(ctx, rng, func(ctx context.Context) error {
		out, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(d.table), Key: key,
			ConditionExpression: ex.Condition(), UpdateExpression: ex.Update(),
			ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
			ReturnValues:                        types.ReturnValueAllOld,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		}, noRetry)
		if err == nil {
			old = out.Attributes
		}
		return err
	})
	return old, res
}

// incrementUpdate is the write of an increment: SET n, lastOp.
func incrementUpdate(o obs, id string) expression.UpdateBuilder {
	return expression.Set(expression.Name(attrN), expression.Value(o.N+1)).
		Set(expression.Name(attrLast), expression.Value(id))
}

// fencedWriteInput is the fenced write of an increment: refused once a newer token has
// been registered at the item.
func (d *dataClient) fencedWriteUpdate(key map[string]types.AttributeValue, o obs, id string, token lockcore.Fence, leaseID string) *types.Update {
	ex, err := expression.NewBuilder().
		WithCondition(lockcore.FenceCondition(attrFence, token)).
		WithUpdate(lockcore.FenceUpdate(incrementUpdate(o, id).Set(expression.Name(attrFenceLease), expression.Value(leaseID)), attrFence, token)).
		Build()
	if err != nil {
		panic(err)
	}
	return &types.Update{
		TableName: aws.String(d.table), Key: key,
		ConditionExpression: ex.Condition(), UpdateExpression: ex.Update(),
		ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
	}
}

func (d *dataClient) fencedWrite(ctx context.Context, rng *rand.Rand, key map[string]types.AttributeValue, o obs, id string, token lockcore.Fence, leaseID string) writeResult {
	u := d.fencedWriteUpdate(key, o, id, token, leaseID)
	return retryWrite(ctx, rng, func(ctx context.Context) error {
		_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: u.TableName, Key: u.Key,
			ConditionExpression: u.ConditionExpression, UpdateExpression: u.UpdateExpression,
			ExpressionAttributeNames: u.ExpressionAttributeNames, ExpressionAttributeValues: u.ExpressionAttributeValues,
		}, noRetry)
		return err
	})
}

// guardedWrite writes several increments in one transaction guarded by lease checks.
func (d *dataClient) guardedWrite(ctx context.Context, rng *rand.Rand, items []types.TransactWriteItem) writeResult {
	return retryWrite(ctx, rng, func(ctx context.Context) error {
		_, err := d.db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: items}, noRetry)
		return err
	})
}

// read reads a counter item (strongly consistent).
func (d *dataClient) read(ctx context.Context, key map[string]types.AttributeValue) (obs, error) {
	out, err := d.db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(d.table), Key: key, ConsistentRead: aws.Bool(true)})
	if err != nil {
		return obs{}, err
	}
	return obsOf(out.Item), nil
}

// plainWrite is the write of the unlocked read-modify-write: no condition at all.
func (d *dataClient) plainWrite(ctx context.Context, rng *rand.Rand, key map[string]types.AttributeValue, o obs, id string) writeResult {
	ex, err := expression.NewBuilder().WithUpdate(incrementUpdate(o, id)).Build()
	if err != nil {
		panic(err)
	}
	return retryWrite(ctx, rng, func(ctx context.Context) error {
		_, err := d.db.UpdateItem(ctx, &dynamodb.UpdateItemInput{
			TableName: aws.String(d.table), Key: key, UpdateExpression: ex.Update(),
			ExpressionAttributeNames: ex.Names(), ExpressionAttributeValues: ex.Values(),
		}, noRetry)
		return err
	})
}
