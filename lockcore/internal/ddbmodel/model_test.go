package ddbmodel_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/lockcore"
	"github.com/turnstile-locks/turnstile/lockcore/internal/ddbmodel"
)

func newModel(t *testing.T, opts ...ddbmodel.Option) (*ddbmodel.DB, *ddbmodel.Table) {
	t.Helper()
	db := ddbmodel.New(opts...)
	tb, err := db.CreateTable("locks", ddbmodel.LockSchema)
	if err != nil {
		t.Fatal(err)
	}
	return db, tb
}

func sv(v string) AV { return &types.AttributeValueMemberS{Value: v} }
func nv(v string) AV { return &types.AttributeValueMemberN{Value: v} }

func mkey(pk, sk string) Item { return Item{"pk": sv(pk), "sk": sv(sk)} }

// TestLockcoreOnModel runs lockcore's own code against the model: the model is a
// lockcore.DynamoDB.
func TestLockcoreOnModel(t *testing.T) {
	ctx := context.Background()
	db, _ := newModel(t)
	m1, err := lockcore.NewMutex(db, "locks", lockcore.WithOwner("w1"))
	if err != nil {
		t.Fatal(err)
	}
	m2, _ := lockcore.NewMutex(db, "locks", lockcore.WithOwner("w2"))
	l1, err := m1.Acquire(ctx, "k", lockcore.NoWait())
	if err != nil {
		t.Fatal(err)
	}
	_, err = m2.TryAcquire(ctx, "k")
	var held *lockcore.HeldError
	if !errors.As(err, &held) || held.Holder == nil || held.Holder.Owner != "w1" {
		t.Fatalf("second acquire: %v, want HeldError held by w1", err)
	}
	if err := l1.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l2, err := m2.TryAcquire(ctx, "k")
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	if l2.Token() <= l1.Token() {
		t.Errorf("fence %d after %d: not increasing", l2.Token(), l1.Token())
	}
	_ = l2.Release(ctx)

	tl, _ := lockcore.NewTicketLock(db, "locks", lockcore.WithOwner("w3"))
	tl1, err := tl.TryAcquire(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	_ = tl1.Release(ctx)
	q, _ := lockcore.NewQueue(db, "locks", lockcore.WithOwner("w4"))
	q1, err := q.TryAcquire(ctx, "q")
	if err != nil {
		t.Fatal(err)
	}
	_ = q1.Release(ctx)

	if _, err := db.CreateTable("data", ddbmodel.LockSchema); err != nil {
		t.Fatal(err)
	}
	il, _ := lockcore.NewItemLocker(db, "data", lockcore.WithOwner("w5"))
	il1, err := il.TryAcquire(ctx, mkey("SKU#1", "STOCK"))
	if err != nil {
		t.Fatal(err)
	}
	if err := il1.Release(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestErrorTypes: the model's errors are the SDK's, as lockcore classifies them.
func TestErrorTypes(t *testing.T) {
	ctx := context.Background()
	db, _ := newModel(t)
	e, _ := expression.NewBuilder().WithCondition(expression.AttributeExists(expression.Name("pk"))).Build()
	_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: mkey("a", "b"),
		ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(),
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld})
	var ccf *types.ConditionalCheckFailedException
	var op *smithy.OperationError
	if !errors.As(err, &ccf) || !errors.As(err, &op) || op.OperationName != "PutItem" || ccf.Item != nil {
		t.Errorf("PutItem on a missing item: %v", err)
	}
	_, err = db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: Item{"pk": sv("a")}})
	var api smithy.APIError
	if !errors.As(err, &api) || api.ErrorCode() != "ValidationException" || api.ErrorFault() != smithy.FaultClient {
		t.Errorf("PutItem without sk: %v", err)
	}
	_, err = db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("nope"), Key: mkey("a", "b")})
	var rnf *types.ResourceNotFoundException
	if !errors.As(err, &rnf) {
		t.Errorf("GetItem on a missing table: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.PutItem(cctx, &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: mkey("a", "b")}); !errors.Is(err, context.Canceled) {
		t.Errorf("PutItem on an ended context: %v", err)
	}
	if got := len(db.Table("locks").Items()); got != 0 {
		t.Errorf("%d items after refused writes", got)
	}
}

// TestInputsAndOutputsAreCopies: a caller changing what it passed or got back does not
// change the table.
func TestInputsAndOutputsAreCopies(t *testing.T) {
	ctx := context.Background()
	db, tb := newModel(t)
	it := mkey("a", "b")
	it["m"] = &types.AttributeValueMemberM{Value: Item{"x": nv("1")}}
	if _, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: it}); err != nil {
		t.Fatal(err)
	}
	it["m"].(*types.AttributeValueMemberM).Value["x"] = nv("2")
	out, _ := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String("locks"), Key: mkey("a", "b")})
	out.Item["m"].(*types.AttributeValueMemberM).Value["x"] = nv("3")
	got := tb.Items()[0]["m"].(*types.AttributeValueMemberM).Value["x"].(*types.AttributeValueMemberN).Value
	if got != "1" {
		t.Errorf("stored m.x = %s, want 1", got)
	}
}

func putN(t *testing.T, db *ddbmodel.DB, sk string, v int) {
	t.Helper()
	it := mkey("p", sk)
	it["v"] = nv(fmt.Sprint(v))
	if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: it}); err != nil {
		t.Fatal(err)
	}
}

func getV(t *testing.T, db *ddbmodel.DB, sk string, consistent bool) string {
	t.Helper()
	out, err := db.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String("locks"), Key: mkey("p", sk), ConsistentRead: aws.Bool(consistent)})
	if err != nil {
		t.Fatal(err)
	}
	if out.Item == nil {
		return "absent"
	}
	return out.Item["v"].(*types.AttributeValueMemberN).Value
}

// TestStaleness: eventually consistent reads see the state the policy picks, strongly
// consistent reads the latest.
func TestStaleness(t *testing.T) {
	lag := uint64(0)
	policy := ddbmodel.StalenessFunc(func(r ddbmodel.Read, oldest, latest uint64) uint64 { return latest - min(lag, latest) })
	db, _ := newModel(t, ddbmodel.WithStaleness(policy), ddbmodel.WithHistory(3))
	putN(t, db, "a", 1) // seq 1
	putN(t, db, "a", 2) // seq 2
	putN(t, db, "b", 7) // seq 3
	if _, err := db.DeleteItem(context.Background(), &dynamodb.DeleteItemInput{TableName: aws.String("locks"), Key: mkey("p", "a")}); err != nil {
		t.Fatal(err)
	} // seq 4
	if db.Seq() != 4 {
		t.Fatalf("seq %d, want 4", db.Seq())
	}
	for _, c := range []struct {
		lag      uint64
		a, b     string
		queryLen int
	}{
		{0, "absent", "7", 1},
		{1, "2", "7", 2},
		{2, "2", "absent", 1},
		{3, "1", "absent", 1},
		{9, "1", "absent", 1}, // clamped to the oldest state kept (seq 1: 3 writes back)
	} {
		lag = c.lag
		if got := getV(t, db, "a", false); got != c.a {
			t.Errorf("lag %d: a = %s, want %s", c.lag, got, c.a)
		}
		if got := getV(t, db, "b", false); got != c.b {
			t.Errorf("lag %d: b = %s, want %s", c.lag, got, c.b)
		}
		if got := getV(t, db, "a", true); got != "absent" {
			t.Errorf("lag %d: consistent a = %s", c.lag, got)
		}
		out, err := db.Query(context.Background(), &dynamodb.QueryInput{TableName: aws.String("locks"),
			KeyConditionExpression: aws.String("pk = :p"), ExpressionAttributeValues: Item{":p": sv("p")}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Items) != c.queryLen {
			t.Errorf("lag %d: query found %d items, want %d", c.lag, len(out.Items), c.queryLen)
		}
	}
}

// TestRandomLagIsDeterministic: the same seed and the same reads see the same states.
func TestRandomLagIsDeterministic(t *testing.T) {
	run := func() []string {
		db, _ := newModel(t, ddbmodel.WithStaleness(ddbmodel.NewRandomLag(42, 0.5, 3)))
		var seen []string
		for i := range 50 {
			putN(t, db, "a", i)
			seen = append(seen, getV(t, db, "a", false))
		}
		return seen
	}
	a, b := run(), run()
	stale := 0
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("read %d: %s then %s", i, a[i], b[i])
		}
		if a[i] != fmt.Sprint(i) {
			stale++
		}
	}
	if stale == 0 || stale == len(a) {
		t.Errorf("%d of %d reads stale, want some", stale, len(a))
	}
}

// TestExpireTTL: items whose TTL attribute lies before now (and within five years) go.
func TestExpireTTL(t *testing.T) {
	db, tb := newModel(t)
	now := time.Unix(1_700_000_000, 500_000_000)
	for sk, ttl := range map[string]AV{
		"past":     nv("1699999999"),
		"now":      nv("1700000000"), // half a second ago: expired
		"future":   nv("1700000001"),
		"ancient":  nv("1000000000"), // more than five years ago: DynamoDB ignores it
		"string":   sv("1"),
		"fraction": nv("1700000000.4"),
	} {
		it := mkey("p", sk)
		it["expiresAt"] = ttl
		if _, err := db.PutItem(context.Background(), &dynamodb.PutItemInput{TableName: aws.String("locks"), Item: it}); err != nil {
			t.Fatal(err)
		}
	}
	gone := tb.ExpireTTL(now, "expiresAt")
	var names []string
	for _, it := range gone {
		names = append(names, it["sk"].(*types.AttributeValueMemberS).Value)
	}
	if fmt.Sprint(names) != "[fraction now past]" {
		t.Errorf("expired %v, want [fraction now past]", names)
	}
	if n := len(tb.Items()); n != 3 {
		t.Errorf("%d items left, want 3", n)
	}
	if again := tb.ExpireTTL(now, "expiresAt"); len(again) != 0 {
		t.Errorf("expired again: %v", again)
	}
}

// TestTransactionAtomic: a cancelled transaction writes nothing.
func TestTransactionAtomic(t *testing.T) {
	ctx := context.Background()
	db, tb := newModel(t)
	putN(t, db, "a", 1)
	_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Put: &types.Put{TableName: aws.String("locks"), Item: mkey("p", "b")}},
		{Delete: &types.Delete{TableName: aws.String("locks"), Key: mkey("p", "a")}},
		{ConditionCheck: &types.ConditionCheck{TableName: aws.String("locks"), Key: mkey("p", "c"),
			ConditionExpression: aws.String("attribute_exists(pk)"), ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld}},
	}})
	var tce *types.TransactionCanceledException
	if !errors.As(err, &tce) || len(tce.CancellationReasons) != 3 || aws.ToString(tce.CancellationReasons[2].Code) != "ConditionalCheckFailed" ||
		aws.ToString(tce.CancellationReasons[0].Code) != "None" {
		t.Fatalf("transaction: %v", err)
	}
	if items := tb.Items(); len(items) != 1 {
		t.Errorf("%d items after a cancelled transaction, want 1", len(items))
	}
}
