package lockcore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"reflect"
	"slices"
	"strconv"
	"time"
	"unsafe"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"
)

// Fence is a fencing token: it strictly increases with every acquisition of a key, for
// the key's whole life — for a Mutex, TicketLock or Queue also after the key's lock rows
// were deleted, and for an ItemLocker (whose key is the data item) also after the item was
// deleted and created again, as long as the wall clocks of the clients that lock it agree
// (see ItemLease.Token). Pass it to the protected resource and have the resource reject
// writes carrying a smaller token than one it has seen (see FenceCondition).
type Fence int64

// item is a DynamoDB item.
type item = map[string]types.AttributeValue

// noSDKRetry turns off the SDK's own retries for a conditional write: a retried write
// whose first attempt landed fails its condition, which would be misread as contention.
// lockcore retries such writes itself and re-reads after ambiguous failures.
func noSDKRetry(o *dynamodb.Options) { o.RetryMaxAttempts = 1 }

// errKind classifies a failed write.
type errKind int

const (
	errCondition errKind = iota // the condition failed: definitive, nothing written
	errRetryable                // definitely not applied (throttled, validation-free 4xx): retry
	errAmbiguous                // may or may not have been applied: re-read before deciding
	errFatal                    // a caller or configuration error: give up
)

func classify(err error) errKind {
	var ns *notSentError
	if errors.As(err, &ns) {
		return errRetryable // the context had ended before the request was sent
	}
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return errCondition
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		for _, r := range tce.CancellationReasons {
			if aws.ToString(r.Code) == "ConditionalCheckFailed" {
				return errCondition
			}
		}
		return errRetryable // TransactionConflict, throttling inside the transaction
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch api.ErrorCode() {
		case "ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded",
			"TransactionConflictException", "TransactionInProgressException", "LimitExceededException":
			return errRetryable
		case "ValidationException", "ResourceNotFoundException", "AccessDeniedException",
			"UnrecognizedClientException", "MissingAuthenticationTokenException", "ItemCollectionSizeLimitExceededException":
			return errFatal
		}
		if api.ErrorFault() == smithy.FaultClient {
			return errFatal
		}
		return errAmbiguous // 5xx: the server may have applied it
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		return errRetryable // never reached the server
	}
	return errAmbiguous // timeouts, resets, cancelled contexts
}

// conditionOld returns the item that made a condition fail, if the engine returned it
// (ReturnValuesOnConditionCheckFailure=ALL_OLD).
func conditionOld(err error) (item, bool) {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) && ccf.Item != nil {
		return ccf.Item, true
	}
	return nil, false
}

// refusedItem returns the item a refused conditional write found: the refusal's own
// copy (every conditional write asks for it), or else reread's (the item is gone, or
// the engine returned none).
func refusedItem(ctx context.Context, err error, reread func(context.Context) (item, error)) (item, error) {
	if old, ok := conditionOld(err); ok {
		return old, nil
	}
	return reread(ctx)
}

// detached gives a short context for clean-up work that must run even though the
// caller's context has ended (re-reads after ambiguous writes, best-effort releases).
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
}

// expr builds a DynamoDB expression or panics: every expression lockcore builds is
// static in shape, so a build error is a programming error caught by the tests.
func expr(b expression.Builder) expression.Expression {
	e, err := b.Build()
	if err != nil {
		panic("lockcore: building expression: " + err.Error())
	}
	return e
}

func newLeaseID(owner string) string { return owner + "#" + randomHex(12) }

// randomHex returns n random bytes in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// readItem reads one item with a strongly consistent GetItem (nil: no such item).
func readItem(ctx context.Context, db DynamoDB, table string, key item) (item, error) {
	return getItem(ctx, db, table, key, true)
}

// getItem reads one item, strongly consistent or not (nil: no such item). An eventually
// consistent read costs half the RCU: waiters far back in a line read so, and only time
// their next read by it.
func getItem(ctx context.Context, db DynamoDB, table string, key item, consistent bool) (item, error) {
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key, ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		return nil, err
	}
	return out.Item, nil
}

// attribute helpers ----------------------------------------------------------------

func attrS(it item, name string) string {
	if v, ok := it[name].(*types.AttributeValueMemberS); ok {
		return v.Value
	}
	return ""
}

func attrN(it item, name string) (int64, bool) {
	if v, ok := it[name].(*types.AttributeValueMemberN); ok {
		n, err := strconv.ParseInt(v.Value, 10, 64)
		return n, err == nil
	}
	return 0, false
}

func attrB(it item, name string) []byte {
	if v, ok := it[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

func s(v string) *types.AttributeValueMemberS { return &types.AttributeValueMemberS{Value: v} }

func n(v int64) *types.AttributeValueMemberN {
	return &types.AttributeValueMemberN{Value: strconv.FormatInt(v, 10)}
}

// value wraps a Go value for the expression builder.
func value(v any) expression.ValueBuilder { return expression.Value(v) }

func name(n string) expression.NameBuilder { return expression.Name(n) }

func sortedKeys(it item) []string {
	keys := make([]string, 0, len(it))
	for k := range it {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// conditionalUpdate is the shape of every conditional UpdateItem lockcore sends: the
// expression's condition and update, and the old item back when the condition fails, so
// the caller learns the holder without a second read.
func conditionalUpdate(table string, key item, e expression.Expression, rv types.ReturnValue) *dynamodb.UpdateItemInput {
	return &dynamodb.UpdateItemInput{
		TableName:                           aws.String(table),
		Key:                                 key,
		ConditionExpression:                 e.Condition(),
		UpdateExpression:                    e.Update(),
		ExpressionAttributeNames:            e.Names(),
		ExpressionAttributeValues:           e.Values(),
		ReturnValues:                        rv,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// cloneUpdate returns a deep copy of u. The builder's methods append to a map that every
// copy of an UpdateBuilder value shares, so adding lockcore's own clauses to the
// caller's builder would change the caller's value (a builder reused for a second item
// would then carry the first write's lock clauses). The package offers no copy, hence
// the reflection; TestUpdateBuilderNotModified fails if the builder's layout changes in
// a way this does not cover.
func cloneUpdate(u expression.UpdateBuilder) expression.UpdateBuilder {
	var out expression.UpdateBuilder
	src, dst := reflect.ValueOf(&u).Elem(), reflect.ValueOf(&out).Elem()
	for i := range src.NumField() {
		sf, df := src.Field(i), dst.Field(i)
		sf = reflect.NewAt(sf.Type(), unsafe.Pointer(sf.UnsafeAddr())).Elem()
		df = reflect.NewAt(df.Type(), unsafe.Pointer(df.UnsafeAddr())).Elem()
		df.Set(deepCopy(sf))
	}
	return out
}

// deepCopy copies maps and slices (one level of slice elements, which the builder never
// changes in place).
func deepCopy(v reflect.Value) reflect.Value {
	switch v.Kind() {
	case reflect.Map:
		if v.IsNil() {
			return v
		}
		m := reflect.MakeMapWithSize(v.Type(), v.Len())
		for it := v.MapRange(); it.Next(); {
			m.SetMapIndex(it.Key(), deepCopy(it.Value()))
		}
		return m
	case reflect.Slice:
		if v.IsNil() {
			return v
		}
		c := reflect.MakeSlice(v.Type(), v.Len(), v.Len())
		reflect.Copy(c, v)
		return c
	}
	return v
}
