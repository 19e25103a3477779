package lockcore_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/lockcore"
)

// Fuzz targets for what callers hand to lockcore: lock keys, namespaces, item keys,
// data, and every option. Properties: nothing panics; every rejection is an
// *OptionError matching ErrInvalidKey or ErrInvalidOption; and exactly the inputs the
// documentation rules out are rejected (the oracles below restate those rules).
//
// No engine is needed: calls that pass validation reach fatalDB, which fails them at
// once with a client-fault API error (not an OptionError).
//
//	go test -run '^$' -fuzz '^FuzzKeys$' -fuzztime 1m ./lockcore
//	go test -run '^$' -fuzz '^FuzzOptions$' -fuzztime 1m ./lockcore
//
// (TestMain starts DynamoDB Local unless DYNAMODB_ENDPOINT is set; these targets do not
// use it, so `make fuzz` sets DYNAMODB_ENDPOINT=unused.)

var errStub = &smithy.GenericAPIError{Code: "ValidationException", Message: "fuzz stub", Fault: smithy.FaultClient}

// fatalDB fails every call with a ValidationException, which lockcore treats as fatal
// (no retry, no wait).
type fatalDB struct{}

func (fatalDB) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return nil, errStub
}
func (fatalDB) PutItem(context.Context, *dynamodb.PutItemInput, ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error) {
	return nil, errStub
}
func (fatalDB) UpdateItem(context.Context, *dynamodb.UpdateItemInput, ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error) {
	return nil, errStub
}
func (fatalDB) DeleteItem(context.Context, *dynamodb.DeleteItemInput, ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error) {
	return nil, errStub
}
func (fatalDB) Query(context.Context, *dynamodb.QueryInput, ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error) {
	return nil, errStub
}
func (fatalDB) TransactWriteItems(context.Context, *dynamodb.TransactWriteItemsInput, ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error) {
	return nil, errStub
}

// emptyDB finds no items; everything else fails as in fatalDB.
type emptyDB struct{ fatalDB }

func (emptyDB) GetItem(context.Context, *dynamodb.GetItemInput, ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error) {
	return &dynamodb.GetItemOutput{}, nil
}

// reservedPrefix is the key prefix lockcore keeps for its own rows.
const reservedPrefix = "turnstile#"

func pkValid(s string) bool {
	return s != "" && len(s) <= lockcore.MaxPartitionKeyBytes && utf8.ValidString(s) && !strings.HasPrefix(s, reservedPrefix)
}

// skValid is the rule for a namespace in a sort key: non-empty UTF-8 without the '#'
// that separates a namespace from a strategy's row suffix, fitting with room to spare
// (room: what lockcore appends to the namespace in the sort key).
func skValid(s string, room int) bool {
	return s != "" && !strings.Contains(s, "#") && len(s)+room <= lockcore.MaxSortKeyBytes && utf8.ValidString(s)
}

// verdict is what the documented rules say of an input.
type verdict int

const (
	rejected verdict = iota // must fail with an *OptionError
	accepted                // must pass validation
	either                  // the rules do not say: accepted or rejected, never a panic
)

func verdictOf(valid bool) verdict {
	if valid {
		return accepted
	}
	return rejected
}

// and combines verdicts: any rejection rejects; otherwise any doubt stays.
func and(vs ...verdict) verdict {
	out := accepted
	for _, v := range vs {
		switch v {
		case rejected:
			return rejected
		case either:
			out = either
		}
	}
	return out
}

// hasPathChars reports characters that DynamoDB's expression builder reads as document
// paths (nesting, list indexes) in an attribute name. The documentation says nothing of
// such names; they must at least never make lockcore panic.
func hasPathChars(name string) bool { return strings.ContainsAny(name, ".[]") }

// checkErr asserts the error contract of one call: rejected iff !valid, and then with
// an *OptionError matching want; otherwise the stub's error (or nil for calls that do
// not reach the database).
func checkErr(t *testing.T, what string, err error, valid bool, want error) {
	t.Helper()
	check(t, what, err, verdictOf(valid), want)
}

func check(t *testing.T, what string, err error, v verdict, want error) {
	t.Helper()
	var oe *lockcore.OptionError
	isOE := errors.As(err, &oe)
	if v == either {
		v = verdictOf(!isOE)
	}
	valid := v == accepted
	switch {
	case valid && isOE:
		t.Fatalf("%s: valid input rejected: %v", what, err)
	case !valid && !isOE:
		t.Fatalf("%s: invalid input not rejected with an OptionError: %v", what, err)
	case !valid && !errors.Is(err, want):
		t.Fatalf("%s: rejection %v does not match %v", what, err, want)
	case isOE && oe.Field == "":
		t.Fatalf("%s: OptionError without a field: %v", what, err)
	case err != nil && !isOE && !errors.Is(err, errStub):
		t.Fatalf("%s: unexpected error %v", what, err)
	}
}

func FuzzKeys(f *testing.F) {
	f.Add("order#42", "lock", "pk", "sk", uint8(0), "SKU#1", "STOCK", uint32(0))
	f.Add("", "", "", "", uint8(1), "", "", uint32(70000))
	f.Add("turnstile#fence#0001", "q", "id", "id", uint8(2), "12", "x", uint32(65536))
	f.Add(strings.Repeat("k", 2048), strings.Repeat("n", 1024), "lockedBy", "v", uint8(3), strings.Repeat("v", 2049), "", uint32(65537))
	f.Add("\xff\xfe", "ns\x00", "a", "b", uint8(4), "\x00", "\xff", uint32(1))
	f.Add("ключ", "名前空間", "pk", "sk", uint8(5), "é", "ü", uint32(12))
	// The clients hold no per-call state: build them once.
	db := fatalDB{}
	m, err := lockcore.NewMutex(db, "locks", lockcore.WithOwner("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	q, err := lockcore.NewQueue(db, "locks", lockcore.WithOwner("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	tl, err := lockcore.NewTicketLock(db, "locks", lockcore.WithOwner("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	il, err := lockcore.NewItemLocker(db, "data", lockcore.WithOwner("fuzz"))
	if err != nil {
		f.Fatal(err)
	}
	ilr, err := lockcore.NewItemLocker(db, "data", lockcore.WithOwner("fuzz"), lockcore.WithRequiredItem())
	if err != nil {
		f.Fatal(err)
	}
	big := make([]byte, 80<<10)
	f.Fuzz(func(t *testing.T, key, ns, nameA, nameB string, types8 uint8, valA, valB string, dataLen uint32) {
		ctx := context.Background()
		data := big[:dataLen%uint32(len(big))]
		dataOK := len(data) <= 64<<10
		nsOpt := lockcore.Namespace(ns)

		// Mutex: key is the partition key, the namespace the sort key.
		_, err := m.Acquire(ctx, key, nsOpt)
		checkErr(t, "Mutex.Acquire", err, pkValid(key) && skValid(ns, 0), lockcore.ErrInvalidKey)
		_, err = m.TryAcquire(ctx, key, nsOpt, lockcore.Data(data))
		if dataOK {
			checkErr(t, "Mutex.TryAcquire", err, pkValid(key) && skValid(ns, 0), lockcore.ErrInvalidKey)
		} else { // acquire options are checked before the key
			checkErr(t, "Mutex.TryAcquire with oversized data", err, false, lockcore.ErrInvalidOption)
		}
		_, err = m.Get(ctx, key, nsOpt)
		checkErr(t, "Mutex.Get", err, pkValid(key) && skValid(ns, 0), lockcore.ErrInvalidKey)
		_, err = m.IsLocked(ctx, key, nsOpt)
		checkErr(t, "Mutex.IsLocked", err, pkValid(key) && skValid(ns, 0), lockcore.ErrInvalidKey)
		_, err = m.Attach(key, "fuzz#lease", nsOpt)
		checkErr(t, "Mutex.Attach", err, pkValid(key) && skValid(ns, 0), lockcore.ErrInvalidKey)
		if err == nil && pkValid(key) {
			if _, err := m.Attach(key, "", nsOpt); !errors.Is(err, lockcore.ErrInvalidOption) {
				t.Fatalf("Attach with an empty lease id: %v", err)
			}
		}

		// Multi-key: every key is a partition key (here key and ns as two keys).
		_, err = m.AcquireAll(ctx, []string{key, ns})
		checkErr(t, "Mutex.AcquireAll", err, pkValid(key) && pkValid(ns), lockcore.ErrInvalidKey)

		// Queue: the sort key is "<ns>#t#<20 digits>"; "lock" (the default) means "queue".
		qns := ns
		if qns == "lock" {
			qns = "queue"
		}
		_, err = q.Acquire(ctx, key, nsOpt)
		checkErr(t, "Queue.Acquire", err, pkValid(key) && skValid(qns, 30), lockcore.ErrInvalidKey)

		// TicketLock: the sort key is "<ns>#ticket"; it stores no data.
		_, err = tl.Acquire(ctx, key, nsOpt)
		checkErr(t, "TicketLock.Acquire", err, pkValid(key) && skValid(ns, len("#ticket")), lockcore.ErrInvalidKey)
		_, err = tl.Get(ctx, key, nsOpt)
		checkErr(t, "TicketLock.Get", err, pkValid(key) && skValid(ns, len("#ticket")), lockcore.ErrInvalidKey)
		_, err = tl.TryAcquire(ctx, key, nsOpt, lockcore.Data(data))
		checkErr(t, "TicketLock.TryAcquire with data", err, false, lockcore.ErrInvalidOption)

		// ItemLocker: one or two key attributes of type S, N or B, 1..2048 bytes, not
		// named like a lock attribute.
		val := func(sel uint8, v string) types.AttributeValue {
			switch sel % 4 {
			case 0:
				return &types.AttributeValueMemberS{Value: v}
			case 1:
				return &types.AttributeValueMemberN{Value: v}
			case 2:
				return &types.AttributeValueMemberB{Value: []byte(v)}
			default:
				return &types.AttributeValueMemberBOOL{Value: len(v)%2 == 0}
			}
		}
		ikey := map[string]types.AttributeValue{nameA: val(types8, valA)}
		if types8&0x80 == 0 {
			ikey[nameB] = val(types8>>2, valB)
		}
		lockAttrs := []string{"lockedBy", "lockTime", "lockOwner", "lockUntil", "lockLeaseMs", "lockRev", "lockFence", "lockWrite"}
		itemValid := len(ikey) >= 1 && len(ikey) <= 2
		names := accepted
		for name, v := range ikey {
			if hasPathChars(name) {
				names = either
			}
			var size int
			switch x := v.(type) {
			case *types.AttributeValueMemberS:
				size = len(x.Value)
			case *types.AttributeValueMemberN:
				size = len(x.Value)
			case *types.AttributeValueMemberB:
				size = len(x.Value)
			default:
				size = -1
			}
			if name == "" || !utf8.ValidString(name) || size < 1 || size > lockcore.MaxPartitionKeyBytes || slices.Contains(lockAttrs, name) {
				itemValid = false
			}
		}
		iv := and(verdictOf(itemValid), names)
		_, err = il.Acquire(ctx, ikey)
		check(t, "ItemLocker.Acquire", err, iv, lockcore.ErrInvalidKey)
		_, err = ilr.Acquire(ctx, ikey) // RequireItem: the key's name goes into a condition
		check(t, "ItemLocker(RequireItem).Acquire", err, iv, lockcore.ErrInvalidKey)
		_, err = il.Attach(ikey, "fuzz#lease")
		check(t, "ItemLocker.Attach", err, iv, lockcore.ErrInvalidKey)
	})
}

// optionOracle restates the documented rules of the options.
type optionOracle struct {
	lease, minLease, hb, ttl, retention, bbase, bmax, waitD, skew time.Duration
	hbSet, wallclock, nilClock                                    bool
	owner                                                         string
	waitKind                                                      uint8
}

func (o optionOracle) commonValid(use uint16) bool {
	lease, minLease := lockcore.DefaultLease, lockcore.DefaultMinLease
	if use&1 != 0 {
		lease = o.lease
	}
	if use&2 != 0 {
		if o.minLease <= 0 {
			return false
		}
		minLease = o.minLease
	}
	if use&8 != 0 && (o.owner == "" || len(o.owner) > 256) {
		return false
	}
	if use&16 != 0 && o.nilClock {
		return false
	}
	if use&32 != 0 && o.wallclock && o.skew < 0 {
		return false
	}
	if use&64 != 0 && o.ttl < 0 {
		return false
	}
	if use&128 != 0 && o.retention <= 0 {
		return false
	}
	if use&256 != 0 && (o.bbase <= 0 || o.bmax < o.bbase) {
		return false
	}
	if use&512 != 0 && (o.waitKind%4 == 0 || (o.waitKind%4 == 2 && o.waitD < 0)) {
		return false
	}
	if lease <= 0 || lease < minLease || lease%time.Millisecond != 0 {
		return false
	}
	if use&4 != 0 && o.hbSet && (o.hb < 0 || (o.hb > 0 && o.hb < lockcore.MinHeartbeat) || o.hb >= lease) {
		return false
	}
	return true
}

// heartbeat is the heartbeat the options give (for the queue, which needs one).
func (o optionOracle) heartbeat(use uint16) time.Duration {
	lease := lockcore.DefaultLease
	if use&1 != 0 {
		lease = o.lease
	}
	if use&4 != 0 && o.hbSet {
		return o.hb
	}
	return lease / 2
}

func (o optionOracle) options(use uint16) []lockcore.Option {
	var opts []lockcore.Option
	if use&1 != 0 {
		opts = append(opts, lockcore.WithLease(o.lease))
	}
	if use&2 != 0 {
		opts = append(opts, lockcore.WithMinLease(o.minLease))
	}
	if use&4 != 0 && o.hbSet {
		opts = append(opts, lockcore.WithHeartbeat(o.hb))
	}
	if use&8 != 0 {
		opts = append(opts, lockcore.WithOwner(o.owner))
	}
	if use&16 != 0 {
		if o.nilClock {
			opts = append(opts, lockcore.WithClock(nil))
		} else {
			opts = append(opts, lockcore.WithClock(lockcore.SystemClock))
		}
	}
	if use&32 != 0 {
		if o.wallclock {
			opts = append(opts, lockcore.WithTakeover(lockcore.WallClockTakeover(o.skew)))
		} else {
			opts = append(opts, lockcore.WithTakeover(lockcore.ObserveTakeover()))
		}
	}
	if use&64 != 0 {
		opts = append(opts, lockcore.WithTTLGrace(o.ttl))
	}
	if use&128 != 0 {
		opts = append(opts, lockcore.WithRetention(o.retention))
	}
	if use&256 != 0 {
		opts = append(opts, lockcore.WithBackoff(o.bbase, o.bmax))
	}
	if use&512 != 0 {
		var p lockcore.WaitPolicy
		switch o.waitKind % 4 {
		case 1:
			p = lockcore.NoWait()
		case 2:
			p = lockcore.WaitUpTo(o.waitD)
		case 3:
			p = lockcore.WaitForever()
		}
		_ = p.String()
		opts = append(opts, lockcore.WithWait(p))
	}
	if use&1024 != 0 {
		opts = append(opts, nil) // nil options are skipped
	}
	return opts
}

func FuzzOptions(f *testing.F) {
	s := int64(time.Second)
	ms := int64(time.Millisecond)
	// lease, minLease, hb, hbSet, owner, clock, wallclock, skew, ttl, retention, base, max, waitKind, waitD, use, maxAttempts, versionAttr, itemAttrs
	f.Add(10*s, 3*s, 5*s, true, "w", false, false, int64(0), 15*60*s, 24*3600*s, 20*ms, s, uint8(3), int64(0), uint16(0xffff), 10, "version", "lockedBy,lockTime,lockOwner,lockUntil,lockLeaseMs,lockRev,lockFence")
	f.Add(int64(0), int64(0), int64(0), false, "", true, true, -s, -s, int64(0), int64(0), int64(0), uint8(0), -s, uint16(0xffff), 0, "", "")
	f.Add(3*s+1, 3*s, 0*s, true, strings.Repeat("o", 257), false, true, 2*s, int64(0), int64(1), ms, ms, uint8(2), int64(0), uint16(0x3ff), 1, "v", "a,b,c,d,e,f,a")
	f.Add(s, ms, s-ms, true, "x", false, false, int64(0), int64(0), int64(1), int64(1), int64(1), uint8(1), int64(1), uint16(7), -1, "v", "a,b,c,d,e,f,g")
	f.Add(int64(1<<62), int64(1), int64(-1), true, "o", false, false, int64(0), int64(0), int64(1), int64(1), int64(1), uint8(2), int64(-1), uint16(0x201), 3, "v", "a,b,c,d,e,f")
	f.Fuzz(func(t *testing.T, lease, minLease, hb int64, hbSet bool, owner string, nilClock, wallclock bool, skew, ttl, retention, bbase, bmax int64,
		waitKind uint8, waitD int64, use uint16, maxAttempts int, versionAttr, itemAttrs string) {
		o := optionOracle{
			lease: time.Duration(lease), minLease: time.Duration(minLease), hb: time.Duration(hb), hbSet: hbSet,
			owner: owner, nilClock: nilClock, wallclock: wallclock, skew: time.Duration(skew),
			ttl: time.Duration(ttl), retention: time.Duration(retention), bbase: time.Duration(bbase), bmax: time.Duration(bmax),
			waitKind: waitKind, waitD: time.Duration(waitD),
		}
		opts := o.options(use)
		valid := o.commonValid(use)
		db := fatalDB{}
		ctx := context.Background()

		m, err := lockcore.NewMutex(db, "locks", opts...)
		checkErr(t, "NewMutex", err, valid, lockcore.ErrInvalidOption)
		if err == nil {
			_, err = m.TryAcquire(ctx, "k")
			checkErr(t, "Mutex.TryAcquire", err, true, nil)
			if m.Owner() == "" {
				t.Fatal("empty owner")
			}
		}
		q, err := lockcore.NewQueue(db, "locks", opts...)
		checkErr(t, "NewQueue", err, valid && o.heartbeat(use) > 0, lockcore.ErrInvalidOption)
		if err == nil {
			_, err = q.TryAcquire(ctx, "k")
			checkErr(t, "Queue.TryAcquire", err, true, nil)
		}
		// The ticket lock needs heartbeats and refuses wall-clock takeover.
		tl, err := lockcore.NewTicketLock(db, "locks", opts...)
		checkErr(t, "NewTicketLock", err, valid && o.heartbeat(use) > 0 && !(use&32 != 0 && o.wallclock), lockcore.ErrInvalidOption)
		if err == nil {
			_, err = tl.TryAcquire(ctx, "k")
			checkErr(t, "TicketLock.TryAcquire", err, true, nil)
		}

		var itemOpts []lockcore.Option
		itemValid := valid
		itemNames := accepted
		if use&2048 != 0 {
			names := strings.Split(itemAttrs, ",")
			var a lockcore.ItemAttributes
			fields := []*string{&a.LockedBy, &a.LockTime, &a.Owner, &a.Until, &a.LeaseMs, &a.Rev, &a.Fence, &a.Write}
			seen := map[string]bool{}
			for i, p := range fields {
				if i < len(names) {
					*p = names[i]
				}
				if *p == "" || seen[*p] || !utf8.ValidString(*p) {
					itemValid = false
				}
				if hasPathChars(*p) {
					itemNames = either
				}
				seen[*p] = true
			}
			itemOpts = append(itemOpts, lockcore.WithItemAttributes(a))
		}
		if use&4096 != 0 {
			itemOpts = append(itemOpts, lockcore.WithRequiredItem(), nil)
		}
		il, err := lockcore.NewItemLocker(db, "data", append(slices.Clone(opts), itemOpts...)...)
		check(t, "NewItemLocker", err, and(verdictOf(itemValid), itemNames), lockcore.ErrInvalidOption)
		if err == nil { // the attribute names go into the lock's expressions here
			_, err = il.TryAcquire(ctx, map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}})
			checkErr(t, "ItemLocker.TryAcquire", err, true, nil)
		}

		var vopts []lockcore.Option
		verValid := valid
		verName := accepted
		if use&8192 != 0 {
			vopts = append(vopts, lockcore.WithMaxAttempts(maxAttempts))
			verValid = verValid && maxAttempts >= 1
		}
		if use&16384 != 0 {
			vopts = append(vopts, lockcore.WithVersionAttribute(versionAttr), nil)
			verValid = verValid && versionAttr != "" && utf8.ValidString(versionAttr) && versionAttr != "versionWriter"
			if hasPathChars(versionAttr) {
				verName = either
			}
		}
		// emptyDB finds no item, so Update gets as far as building its conditional write.
		v, err := lockcore.NewVersioned(emptyDB{}, "data", append(slices.Clone(opts), vopts...)...)
		check(t, "NewVersioned", err, and(verdictOf(verValid), verName), lockcore.ErrInvalidOption)
		if err == nil {
			_, _, err = v.Update(ctx, map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}},
				func(map[string]types.AttributeValue) (map[string]types.AttributeValue, error) {
					return map[string]types.AttributeValue{"n": &types.AttributeValueMemberN{Value: "1"}}, nil
				})
			checkErr(t, "Versioned.Update", err, true, nil)
		}
	})
}
