package lockcore_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// exampleTables connects to the engine named by DYNAMODB_ENDPOINT and creates a lock
// table and a data table (string keys pk and sk) for the examples, afresh each time.
func exampleTables() (db *dynamodb.Client, locks, data string) {
	ctx := context.Background()
	db = newClient(os.Getenv("DYNAMODB_ENDPOINT"))
	locks, data = "example-locks", "example-inventory"
	for _, name := range []string{locks, data} {
		if _, err := db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: &name}); err == nil {
			_ = dynamodb.NewTableNotExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: &name}, time.Minute)
		}
	}
	if err := lockcore.CreateLockTable(ctx, db, locks); err != nil {
		log.Fatal(err)
	}
	if err := createDataTable(ctx, db, data); err != nil {
		log.Fatal(err)
	}
	return db, locks, data
}

func Example() {
	ctx := context.Background()
	db, locks, _ := exampleTables()

	m, err := lockcore.NewMutex(db, locks, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := m.Acquire(ctx, "order#42", lockcore.NoWait())
	if err != nil {
		log.Fatal(err)
	}
	// ... work on order 42, stopping if lease.Done() closes ...
	other, _ := lockcore.NewMutex(db, locks, lockcore.WithOwner("worker-2"))
	_, err = other.TryAcquire(ctx, "order#42")
	var held *lockcore.HeldError
	if errors.As(err, &held) {
		fmt.Println("held by", held.Holder.Owner)
	}
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("released")
	// Output:
	// held by worker-1
	// released
}

func ExampleItemLocker() {
	ctx := context.Background()
	db, _, data := exampleTables()
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#apple"},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
	il, err := lockcore.NewItemLocker(db, data, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	// Call 1: lock and read.
	lease, err := il.Acquire(ctx, key)
	if err != nil {
		log.Fatal(err)
	}
	stock := 0
	if v, ok := lease.Item()["available"].(*types.AttributeValueMemberN); ok {
		stock, _ = strconv.Atoi(v.Value)
	}
	// Call 2: write and unlock, only if the lease is still ours.
	item, err := il.UpdateAndRelease(ctx, lease,
		expression.Set(expression.Name("available"), expression.Value(stock+10)), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("available:", item["available"].(*types.AttributeValueMemberN).Value)
	// Output: available: 10
}

// A locked item written together with another item in the caller's own transaction:
// the stock item's update carries the release (ReleaseUpdate) and its condition is the
// lease (HeldCondition); the order is written in the same TransactWriteItems, so both
// land or neither does.
func ExampleItemLease_ReleaseUpdate() {
	ctx := context.Background()
	db, _, data := exampleTables()
	stockKey := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#pear"},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
	il, err := lockcore.NewItemLocker(db, data, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	hbCtx, stopHeartbeat := context.WithCancel(ctx)
	defer stopHeartbeat()
	lease, err := il.Acquire(hbCtx, stockKey)
	if err != nil {
		log.Fatal(err)
	}
	reserve := expression.Set(expression.Name("reserved"),
		expression.Plus(expression.IfNotExists(expression.Name("reserved"), expression.Value(0)), expression.Value(1)))
	e, err := expression.NewBuilder().WithUpdate(lease.ReleaseUpdate(reserve)).WithCondition(lease.HeldCondition()).Build()
	if err != nil {
		log.Fatal(err)
	}
	stopHeartbeat() // no renewal may race the releasing write
	_, err = db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: []types.TransactWriteItem{
		{Update: &types.Update{TableName: &data, Key: stockKey, UpdateExpression: e.Update(),
			ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values()}},
		{Put: &types.Put{TableName: &data, Item: map[string]types.AttributeValue{
			"pk": &types.AttributeValueMemberS{Value: "ORDER#1"},
			"sk": &types.AttributeValueMemberS{Value: "ORDER"},
		}}},
	}})
	if err != nil {
		log.Fatal(err)
	}
	// The item is free again.
	next, err := il.TryAcquire(ctx, stockKey)
	if err != nil {
		log.Fatal(err)
	}
	defer next.Release(ctx)
	fmt.Println("reserved:", next.Item()["reserved"].(*types.AttributeValueMemberN).Value)
	// Output: reserved: 1
}

// An order item created PENDING in the write that locks it: the take that locks an
// absent item also writes what SetIfAbsent names (only where the item lacks it), so a new
// item costs no second write, and an existing one keeps its attributes. A waiter that is
// in no hurry (here: behind a duplicate of its own work) reads at most every 250 ms.
func ExampleSetIfAbsent() {
	ctx := context.Background()
	db, _, data := exampleTables()
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "ORDER#42"},
		"sk": &types.AttributeValueMemberS{Value: "ORDER"},
	}
	il, err := lockcore.NewItemLocker(db, data, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := il.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second), lockcore.MinPollInterval(250*time.Millisecond),
		lockcore.SetIfAbsent(map[string]types.AttributeValue{
			"status": &types.AttributeValueMemberS{Value: "PENDING"},
		}))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", lease.Item()["status"].(*types.AttributeValueMemberS).Value)
	item, err := il.UpdateAndRelease(ctx, lease,
		expression.Set(expression.Name("status"), expression.Value("RESERVED")), nil)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("status:", item["status"].(*types.AttributeValueMemberS).Value)
	// Output:
	// status: PENDING
	// status: RESERVED
}

// A caller that watched a held item before queueing for it (polling for a result another
// invocation was to write, say) tells Acquire what it saw and when: if the holder and its
// lockRev are unchanged when the wait begins, the holder has been silent since then, and a
// dead holder is taken over a lease after that, not a lease after the Acquire. Here the
// item is free, and the lease is taken at once.
func ExampleSeen() {
	ctx := context.Background()
	db, _, data := exampleTables()
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#7"},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
	out, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: &data, Key: key})
	if err != nil {
		log.Fatal(err)
	}
	seenAt := time.Now() // when the read was answered
	il, err := lockcore.NewItemLocker(db, data, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	seen := out.Item
	if seen == nil {
		seen = key // no item yet: nobody holds it
	}
	lease, err := il.Acquire(ctx, key, lockcore.WaitUpTo(10*time.Second), lockcore.Seen(seen, seenAt))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("held:", lease.Token() > 0)
	if err := lease.Release(ctx); err != nil {
		log.Fatal(err)
	}
	// Output: held: true
}

func ExampleQueue() {
	ctx := context.Background()
	db, locks, _ := exampleTables()
	q, err := lockcore.NewQueue(db, locks, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := q.Acquire(ctx, "hot-sku", lockcore.WaitUpTo(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("ticket", lease.Token())
	_ = lease.Release(ctx)
	// Output: ticket 1
}

func ExampleTicketLock() {
	ctx := context.Background()
	db, locks, _ := exampleTables()
	tl, err := lockcore.NewTicketLock(db, locks, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := tl.Acquire(ctx, "hot-sku", lockcore.WaitUpTo(5*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	// The token is epoch<<32 | ticket: the first ticket of the row's first epoch.
	fmt.Println("epoch", lease.Token().Epoch(), "ticket", lease.Token().Seq())
	info, _ := tl.Get(ctx, "hot-sku")
	fmt.Println("held:", info.Held, "waiting:", info.Waiting)
	_ = lease.Release(ctx)
	// Output:
	// epoch 1 ticket 1
	// held: true waiting: 0
}

func ExampleMutex_AcquireAll() {
	ctx := context.Background()
	db, locks, _ := exampleTables()
	m, _ := lockcore.NewMutex(db, locks, lockcore.WithOwner("worker-1"))
	// Any order in, canonical order inside: no deadlock with a caller asking for b, a.
	ml, err := m.AcquireAll(ctx, []string{"sku#b", "sku#a"})
	if err != nil {
		log.Fatal(err)
	}
	for _, l := range ml.Leases() {
		fmt.Println(l.Key())
	}
	_ = ml.Release(ctx)
	// Output:
	// sku#a
	// sku#b
}

func ExampleVersioned() {
	ctx := context.Background()
	db, _, data := exampleTables()
	v, _ := lockcore.NewVersioned(db, data)
	key := map[string]types.AttributeValue{
		"pk": &types.AttributeValueMemberS{Value: "SKU#pear"},
		"sk": &types.AttributeValueMemberS{Value: "STOCK"},
	}
	_, version, err := v.Update(ctx, key, func(cur map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
		return map[string]types.AttributeValue{"available": &types.AttributeValueMemberN{Value: "5"}}, nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("version", version)
	// Output: version 1
}

// Do is the call most code wants: acquire, work under the lease's context, release.
func ExampleDo() {
	ctx := context.Background()
	db, locks, _ := exampleTables()
	m, err := lockcore.NewMutex(db, locks, lockcore.WithOwner("worker-1"))
	if err != nil {
		log.Fatal(err)
	}
	err = lockcore.Do(ctx, m, "invoice#7", func(ctx context.Context, lease *lockcore.Lease) error {
		// ctx ends if the lease is lost; write with lease.Token() or m.GuardCheck(lease).
		fmt.Println("working under token epoch", lease.Token().Epoch() > 0)
		return nil
	}, lockcore.WaitUpTo(2*time.Second))
	fmt.Println("err:", err)
	// Output:
	// working under token epoch true
	// err: <nil>
}

// A worker that locks one key again and again keeps its lease across its own release
// and next acquisition for up to a second of tenure (bounded bypass), if it comes back
// within 200 ms: the second acquisition continues the first's lease, same token, without
// a call.
func ExampleWithBypass() {
	ctx := context.Background()
	db, locks, _ := exampleTables()
	m, err := lockcore.NewMutex(db, locks, lockcore.WithOwner("worker-1"),
		lockcore.WithBypass(time.Second, 200*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	var tokens []lockcore.Fence
	for range 2 {
		lease, err := m.Acquire(ctx, "account#7")
		if err != nil {
			log.Fatal(err)
		}
		tokens = append(tokens, lease.Token())
		// ... one piece of work for account 7 ...
		if err := lease.Release(ctx); err != nil { // renewed and kept for 200 ms
			log.Fatal(err)
		}
	}
	fmt.Println("same lease:", tokens[0] == tokens[1])
	// Output: same lease: true
}
