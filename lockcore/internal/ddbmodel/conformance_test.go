package ddbmodel_test

// The conformance test: random operation sequences run against the model and against
// DynamoDB Local (DYNAMODB_ENDPOINT; the test fails without it, it never skips), each
// sequence on a fresh table, and every answer must be the same: the returned items and
// attributes (numbers as text, sets in any order), the kind of error (condition failed,
// validation, item too large, transaction cancelled with the same reasons and items),
// the pages of queries with their LastEvaluatedKey, and the table's contents at the end.
//
//	DYNAMODB_ENDPOINT=http://127.0.0.1:8000 go test -run TestConformance ./internal/ddbmodel
//	go test -run TestConformance -seed 17 -v ./internal/ddbmodel      # replay one sequence, op by op
//	DDBMODEL_SEQS=2000 go test -run TestConformance ./internal/ddbmodel  # more sequences
//
// Environment: DDBMODEL_SEED (one seed, like -seed), DDBMODEL_SEQS (default 150),
// DDBMODEL_OPS (operations per sequence, default 60), DDBMODEL_FIRST (the first seed of a
// run, default 1), DDBMODEL_WORKERS (sequences run at once, default 6). The default run
// takes about 30 s on an idle 2-core machine: DynamoDB Local serializes table creation and
// deletion (about 0.1 s per sequence), which bounds how many sequences fit.
//
// Every fifth seed runs on a table with a hash key only; seeds 3 mod 7 fill one partition
// with items near 400 KB, so that queries reach the 1 MB page.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/feature/dynamodb/expression"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go"

	"github.com/turnstile-locks/turnstile/lockcore"
	"github.com/turnstile-locks/turnstile/lockcore/internal/ddbmodel"
)

// The model stands in for the engine wherever lockcore takes one.
var (
	_ lockcore.DynamoDB     = (*ddbmodel.DB)(nil)
	_ lockcore.InspectorAPI = (*ddbmodel.DB)(nil)
)

var seedFlag = flag.Int64("seed", 0, "replay one conformance sequence (0: run many; env DDBMODEL_SEED)")

type AV = types.AttributeValue
type Item = map[string]AV

// api is what the sequences call: *dynamodb.Client and *ddbmodel.DB both have it.
type api interface {
	GetItem(ctx context.Context, in *dynamodb.GetItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.GetItemOutput, error)
	PutItem(ctx context.Context, in *dynamodb.PutItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.PutItemOutput, error)
	UpdateItem(ctx context.Context, in *dynamodb.UpdateItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.UpdateItemOutput, error)
	DeleteItem(ctx context.Context, in *dynamodb.DeleteItemInput, optFns ...func(*dynamodb.Options)) (*dynamodb.DeleteItemOutput, error)
	Query(ctx context.Context, in *dynamodb.QueryInput, optFns ...func(*dynamodb.Options)) (*dynamodb.QueryOutput, error)
	TransactWriteItems(ctx context.Context, in *dynamodb.TransactWriteItemsInput, optFns ...func(*dynamodb.Options)) (*dynamodb.TransactWriteItemsOutput, error)
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

func envInt(name string, def int64) int64 {
	if s := os.Getenv(name); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			panic(fmt.Sprintf("%s=%q: %v", name, s, err))
		}
		return n
	}
	return def
}

func engine(t *testing.T) *dynamodb.Client {
	t.Helper()
	endpoint := os.Getenv("DYNAMODB_ENDPOINT")
	if endpoint == "" {
		t.Fatal("the conformance test needs DynamoDB Local: set DYNAMODB_ENDPOINT (make engine prints one)")
	}
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 2 * time.Second }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = 30 * time.Second
			t.MaxIdleConnsPerHost = 16
		})
	db := dynamodb.New(dynamodb.Options{
		Region:           "us-east-1",
		BaseEndpoint:     aws.String(endpoint),
		HTTPClient:       httpClient,
		RetryMaxAttempts: 1,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "ddbmodel conformance"}, nil
		}),
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Fatalf("DynamoDB engine at %s does not answer: %v", endpoint, err)
	}
	return db
}

func TestConformance(t *testing.T) {
	eng := engine(t)
	ops := int(envInt("DDBMODEL_OPS", 60))
	var seeds []uint64
	if s := *seedFlag; s != 0 {
		seeds = []uint64{uint64(s)}
	} else if s := envInt("DDBMODEL_SEED", 0); s != 0 {
		seeds = []uint64{uint64(s)}
	} else {
		first, n := envInt("DDBMODEL_FIRST", 1), envInt("DDBMODEL_SEQS", 150)
		for i := range n {
			seeds = append(seeds, uint64(first+i))
		}
	}
	workers := int(envInt("DDBMODEL_WORKERS", 6))
	var (
		mu       sync.Mutex
		failures []string
		wg       sync.WaitGroup
	)
	ch := make(chan uint64)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for seed := range ch {
				msg, transient := runSequence(eng, seed, ops, len(seeds) == 1, t)
				for try := 0; transient && try < 2; try++ {
					// The engine's connection failed: run the sequence again on a
					// fresh table (it is deterministic).
					t.Logf("seed %d: again after a transport failure: %s", seed, msg)
					msg, transient = runSequence(eng, seed, ops, len(seeds) == 1, t)
				}
				if msg != "" {
					mu.Lock()
					failures = append(failures, msg)
					mu.Unlock()
				}
			}
		}()
	}
	for _, s := range seeds {
		mu.Lock()
		stop := len(failures) >= 5
		mu.Unlock()
		if stop {
			break
		}
		ch <- s
	}
	close(ch)
	wg.Wait()
	sort.Strings(failures)
	for _, f := range failures {
		t.Error(f)
	}
	if len(failures) == 0 {
		t.Logf("%d sequences of %d operations: the model and DynamoDB Local agree", len(seeds), ops)
	}
}

// runSequence runs one seeded sequence against both and returns a failure report ("":
// they agreed); transient says the engine could not be reached.
func runSequence(eng *dynamodb.Client, seed uint64, nops int, verbose bool, t *testing.T) (msg string, transient bool) {
	ctx := context.Background()
	g := newGen(seed)
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	table := fmt.Sprintf("ddbmodel-%d-%s", seed, hex.EncodeToString(b))
	if err := createTable(ctx, eng, table, g.schema); err != nil {
		return fmt.Sprintf("seed %d: create table: %v", seed, err), true
	}
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = eng.DeleteTable(dctx, &dynamodb.DeleteTableInput{TableName: aws.String(table)})
	}()
	model := ddbmodel.New()
	if _, err := model.CreateTable(table, g.schema); err != nil {
		return fmt.Sprintf("seed %d: model table: %v", seed, err), false
	}
	g.model, g.table = model, table
	for i := range nops {
		o := g.op()
		want := o.run(ctx, eng, table)
		got := o.run(ctx, model, table)
		if verbose {
			t.Logf("op %d: %s\n  engine: %s", i, o.desc, want)
			if strings.HasPrefix(o.desc, "Query") {
				debugSizes(t, model, table)
			}
		}
		if want.kind == "Transport" {
			return fmt.Sprintf("seed %d op %d: %s\n  engine failed: %s", seed, i, o.desc, want.msg), true
		}
		if !want.same(got) {
			return fmt.Sprintf("seed %d op %d (replay: go test -run TestConformance -seed %d -v): %s\n  engine: %s\n  model:  %s", seed, i, seed, o.desc, want, got), false
		}
	}
	want, werr := scanAll(ctx, eng, table)
	got, gerr := scanAll(ctx, model, table)
	if werr != nil || gerr != nil {
		return fmt.Sprintf("seed %d: final scan: engine %v, model %v", seed, werr, gerr), werr != nil
	}
	if want != got {
		return fmt.Sprintf("seed %d: final contents differ\n  engine: %s\n  model:  %s", seed, want, got), false
	}
	return "", false
}

func createTable(ctx context.Context, db *dynamodb.Client, name string, s ddbmodel.Schema) error {
	in := &dynamodb.CreateTableInput{
		TableName:            aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{{AttributeName: aws.String(s.HashKey), AttributeType: types.ScalarAttributeTypeS}},
		KeySchema:            []types.KeySchemaElement{{AttributeName: aws.String(s.HashKey), KeyType: types.KeyTypeHash}},
		BillingMode:          types.BillingModePayPerRequest,
	}
	if s.RangeKey != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions, types.AttributeDefinition{AttributeName: aws.String(s.RangeKey), AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema, types.KeySchemaElement{AttributeName: aws.String(s.RangeKey), KeyType: types.KeyTypeRange})
	}
	out, err := db.CreateTable(ctx, in)
	if err != nil {
		return err
	}
	if out.TableDescription != nil && out.TableDescription.TableStatus == types.TableStatusActive {
		return nil
	}
	return dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute)
}

// scanAll renders the table's items in key order.
func scanAll(ctx context.Context, db api, table string) (string, error) {
	var items []string
	var start Item
	for {
		out, err := db.Scan(ctx, &dynamodb.ScanInput{TableName: aws.String(table), ConsistentRead: aws.Bool(true), ExclusiveStartKey: start})
		if err != nil {
			return "", err
		}
		for _, it := range out.Items {
			items = append(items, renderItem(it))
		}
		if len(out.LastEvaluatedKey) == 0 {
			break
		}
		start = out.LastEvaluatedKey
	}
	sort.Strings(items)
	return strings.Join(items, "\n            "), nil
}

// results ---------------------------------------------------------------------------

// result is one call's outcome in comparable form.
type result struct {
	kind string // "ok", "ConditionalCheckFailed", "Validation", "TooLarge", "Cancelled", "Transport" or an error code
	out  string // the returned data, rendered
	msg  string // the error's message (shown, not compared)
}

func (r result) same(o result) bool { return r.kind == o.kind && r.out == o.out }

func (r result) String() string {
	s := r.kind
	if r.out != "" {
		s += " " + r.out
	}
	if r.msg != "" {
		s += " (" + r.msg + ")"
	}
	return s
}

func tooLargeMsg(msg string) bool { return strings.Contains(msg, "exceeded the maximum allowed size") }

func errResult(err error) result {
	var ccf *types.ConditionalCheckFailedException
	if errors.As(err, &ccf) {
		return result{kind: "ConditionalCheckFailed", out: "item=" + renderItem(ccf.Item)}
	}
	var tce *types.TransactionCanceledException
	if errors.As(err, &tce) {
		var rs []string
		for _, r := range tce.CancellationReasons {
			code := aws.ToString(r.Code)
			if code == "ValidationError" && tooLargeMsg(aws.ToString(r.Message)) {
				code += "(too large)"
			}
			s := code
			if r.Item != nil {
				s += renderItem(r.Item)
			}
			rs = append(rs, s)
		}
		return result{kind: "Cancelled", out: "[" + strings.Join(rs, " ") + "]", msg: aws.ToString(tce.Message)}
	}
	var api smithy.APIError
	if errors.As(err, &api) {
		switch {
		case api.ErrorCode() == "ValidationException" && tooLargeMsg(api.ErrorMessage()):
			return result{kind: "TooLarge", msg: api.ErrorMessage()}
		case api.ErrorCode() == "ValidationException":
			return result{kind: "Validation", msg: api.ErrorMessage()}
		}
		return result{kind: api.ErrorCode(), msg: api.ErrorMessage()}
	}
	return result{kind: "Transport", msg: err.Error()}
}

func renderItem(it Item) string {
	if it == nil {
		return "nil"
	}
	ks := make([]string, 0, len(it))
	for k := range it {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	b.WriteByte('{')
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%q:%s", k, render(it[k]))
	}
	b.WriteByte('}')
	return b.String()
}

// canon renders a number by value: DynamoDB Local returns some numbers as they were
// written ("1e2", "5.0": nested in maps and lists, written by SET or by a transaction's
// Put) where the service and the model return canonical text ("100", "5").
func canon(n string) string {
	if c, ok := ddbmodel.CanonicalNumber(n); ok {
		return c
	}
	return "?" + n
}

func render(v AV) string {
	switch v := v.(type) {
	case *types.AttributeValueMemberS:
		if len(v.Value) > 40 {
			return fmt.Sprintf("S(%d bytes %q…)", len(v.Value), v.Value[:8])
		}
		return fmt.Sprintf("S%q", v.Value)
	case *types.AttributeValueMemberN:
		return "N" + canon(v.Value)
	case *types.AttributeValueMemberB:
		return fmt.Sprintf("B%x", v.Value)
	case *types.AttributeValueMemberBOOL:
		return fmt.Sprintf("BOOL(%v)", v.Value)
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberSS:
		s := slices.Clone(v.Value)
		sort.Strings(s)
		return fmt.Sprintf("SS%q", s)
	case *types.AttributeValueMemberNS:
		s := make([]string, len(v.Value))
		for i, e := range v.Value {
			s[i] = canon(e)
		}
		sort.Strings(s)
		return fmt.Sprintf("NS%v", s)
	case *types.AttributeValueMemberBS:
		s := slices.Clone(v.Value)
		slices.SortFunc(s, bytes.Compare)
		return fmt.Sprintf("BS%x", s)
	case *types.AttributeValueMemberL:
		parts := make([]string, len(v.Value))
		for i, e := range v.Value {
			parts[i] = render(e)
		}
		return "L[" + strings.Join(parts, " ") + "]"
	case *types.AttributeValueMemberM:
		return "M" + renderItem(v.Value)
	}
	return fmt.Sprintf("?%T", v)
}

// operations ------------------------------------------------------------------------

type op struct {
	desc string
	run  func(ctx context.Context, db api, table string) result
}

type gen struct {
	rng    *mrand.Rand
	seed   uint64
	schema ddbmodel.Schema
	pks    []string
	sks    []string
	big    float64 // probability of a write near 400 KB
	model  *ddbmodel.DB
	table  string
}

func newGen(seed uint64) *gen {
	g := &gen{rng: mrand.New(mrand.NewPCG(seed, 0x5eed)), seed: seed, schema: ddbmodel.LockSchema,
		pks: []string{"a", "b", "a#1"}, sks: []string{"x", "x#1", "x#2", "y", "y#1", "xz"}, big: 0.02}
	if seed%5 == 0 {
		g.schema = ddbmodel.Schema{HashKey: "id"}
		g.pks = []string{"a", "b", "c", "d"}
		g.sks = nil
	}
	if seed%7 == 3 {
		g.big = 0.3 // many items near the limit: queries hit the 1 MB page
		g.pks = g.pks[:1]
	}
	return g
}

func (g *gen) pick(n int) int        { return g.rng.IntN(n) }
func (g *gen) chance(p float64) bool { return g.rng.Float64() < p }

func pickOf[T any](g *gen, xs []T) T { return xs[g.pick(len(xs))] }

func (g *gen) key() Item {
	k := Item{g.schema.HashKey: &types.AttributeValueMemberS{Value: pickOf(g, g.pks)}}
	if g.schema.RangeKey != "" {
		k[g.schema.RangeKey] = &types.AttributeValueMemberS{Value: pickOf(g, g.sks)}
	}
	return k
}

func keyString(k Item) string { return renderItem(k) }

// attributes of the sequences: their usual types.
var attrs = []struct {
	name string
	kind string
}{
	{"n", "N"}, {"m", "N"}, {"w#a", "N"}, {"s", "S"}, {"w#b", "S"}, {"d", "S"},
	{"mp", "M"}, {"f", "BOOL"}, {"ss", "SS"}, {"ns", "NS"}, {"l", "L"}, {"z", "NULL"}, {"bin", "B"},
}

var numbers = []string{"0", "1", "2", "-1", "3", "10", "1.5", "1.50", "-2.25", "100", "1e2", "0.001", "7",
	"99999999999999999999999999999999999999", "1e125", "-1e-130", "12345678901234567890.123456789012345678", "0.5", "-0"}

var strs = []string{"", "a", "ab", "abc", "x", "x#1", "é", "b", "zz", "é€", "😀"}

func (g *gen) number() AV {
	if g.chance(0.7) {
		return &types.AttributeValueMemberN{Value: numbers[g.pick(7)]}
	}
	return &types.AttributeValueMemberN{Value: pickOf(g, numbers)}
}

func (g *gen) str() AV { return &types.AttributeValueMemberS{Value: pickOf(g, strs)} }

func (g *gen) valueOf(kind string) AV {
	switch kind {
	case "N":
		return g.number()
	case "S":
		if g.chance(0.05) {
			return &types.AttributeValueMemberS{Value: strings.Repeat("abcdefgh", 1+g.pick(200))}
		}
		return g.str()
	case "M":
		m := map[string]AV{}
		for _, k := range []string{"k1", "k2", "x#y"} {
			if g.chance(0.5) {
				m[k] = g.anyScalar()
			}
		}
		return &types.AttributeValueMemberM{Value: m}
	case "BOOL":
		return &types.AttributeValueMemberBOOL{Value: g.chance(0.5)}
	case "NULL":
		return &types.AttributeValueMemberNULL{Value: true}
	case "B":
		return &types.AttributeValueMemberB{Value: []byte(pickOf(g, []string{"", "a", "ab", "\x00\xff"}))}
	case "SS":
		return &types.AttributeValueMemberSS{Value: g.subset([]string{"a", "b", "c", "x#1"})}
	case "NS":
		return &types.AttributeValueMemberNS{Value: g.subset([]string{"1", "2", "3", "1.5", "-1"})}
	case "L":
		var l []AV
		for range g.pick(3) {
			l = append(l, g.anyScalar())
		}
		return &types.AttributeValueMemberL{Value: l}
	}
	panic(kind)
}

func (g *gen) subset(xs []string) []string {
	var out []string
	for _, x := range xs {
		if g.chance(0.4) {
			out = append(out, x)
		}
	}
	if len(out) == 0 {
		out = append(out, pickOf(g, xs))
	}
	return out
}

func (g *gen) anyScalar() AV {
	switch g.pick(4) {
	case 0:
		return g.number()
	case 1:
		return g.str()
	case 2:
		return &types.AttributeValueMemberBOOL{Value: g.chance(0.5)}
	}
	return g.valueOf("NS")
}

// value returns a value for an attribute, usually of its own type.
func (g *gen) value(name string) AV {
	kind := "S"
	for _, a := range attrs {
		if a.name == name {
			kind = a.kind
		}
	}
	if g.chance(0.1) {
		kind = pickOf(g, []string{"N", "S", "BOOL", "SS", "NS", "L", "M"})
	}
	return g.valueOf(kind)
}

func (g *gen) attrName() string { return attrs[g.pick(len(attrs))].name }

// path returns an attribute name for the expression builder, sometimes a path into mp.
func (g *gen) path() (string, string) {
	if g.chance(0.15) {
		k := pickOf(g, []string{"k1", "k2", "k3"})
		return "mp." + k, "N"
	}
	a := attrs[g.pick(len(attrs))]
	return a.name, a.kind
}

func (g *gen) scalarFor(kind string) AV {
	if g.chance(0.15) {
		return g.anyScalar()
	}
	switch kind {
	case "N", "S", "B":
		return g.valueOf(kind)
	}
	return g.anyScalar()
}

// cond returns a random condition.
func (g *gen) cond(depth int) expression.ConditionBuilder {
	if depth < 2 && g.chance(0.35) {
		switch g.pick(3) {
		case 0:
			return expression.And(g.cond(depth+1), g.cond(depth+1))
		case 1:
			return expression.Or(g.cond(depth+1), g.cond(depth+1))
		default:
			return expression.Not(g.cond(depth + 1))
		}
	}
	p, kind := g.path()
	n := expression.Name(p)
	v := expression.Value(g.scalarFor(kind))
	switch g.pick(14) {
	case 0, 1:
		return expression.AttributeExists(n)
	case 2, 3:
		return expression.AttributeNotExists(n)
	case 4:
		return expression.Equal(n, v)
	case 5:
		return expression.NotEqual(n, v)
	case 6:
		return expression.LessThan(n, v)
	case 7:
		return expression.LessThanEqual(n, v)
	case 8:
		if g.chance(0.2) {
			p2, _ := g.path()
			return expression.GreaterThan(n, expression.Name(p2))
		}
		return expression.GreaterThan(n, v)
	case 9:
		if g.chance(0.1) {
			return expression.GreaterThanEqual(n, expression.Value(&types.AttributeValueMemberBOOL{Value: true}))
		}
		return expression.GreaterThanEqual(n, v)
	case 10:
		return expression.BeginsWith(n, pickOf(g, strs))
	case 11:
		return expression.Between(n, v, expression.Value(g.scalarFor(kind)))
	case 12:
		switch g.pick(4) {
		case 0:
			return expression.AttributeType(n, pickOf(g, []expression.DynamoDBAttributeType{expression.String, expression.Number, expression.StringSet, expression.Map, expression.Boolean, expression.Null, expression.List}))
		case 1:
			return expression.Contains(n, pickOf(g, []string{"a", "1", "x#1", "b"}))
		case 2:
			return expression.In(n, v, expression.Value(g.scalarFor(kind)))
		}
		return expression.Size(n).GreaterThan(expression.Value(&types.AttributeValueMemberN{Value: pickOf(g, []string{"0", "1", "2", "3"})}))
	}
	return expression.Equal(n, v)
}

// update returns a random update.
func (g *gen) update() (expression.UpdateBuilder, bool) {
	var u expression.UpdateBuilder
	used := map[string]bool{}
	n := 1 + g.pick(4)
	big := g.chance(g.big)
	if big {
		u = u.Set(expression.Name("d"), expression.Value(g.bigString()))
		used["d"] = true
	}
	for range n {
		p, kind := g.path()
		if used[p] && !g.chance(0.05) { // an occasional overlap: a validation error
			continue
		}
		used[p] = true
		name := expression.Name(p)
		switch g.pick(10) {
		case 0, 1:
			u = u.Set(name, expression.Value(g.value(p)))
		case 2:
			u = u.Set(name, expression.IfNotExists(name, expression.Value(g.value(p))))
		case 3:
			u = u.Set(name, expression.Plus(expression.IfNotExists(name, expression.Value(g.number())), expression.Value(g.number())))
		case 4:
			src, _ := g.path()
			if g.chance(0.5) {
				u = u.Set(name, expression.Plus(expression.Name(src), expression.Value(g.number())))
			} else {
				u = u.Set(name, expression.Minus(expression.Name(src), expression.Value(g.number())))
			}
		case 5:
			u = u.Remove(name)
		case 6:
			if kind == "SS" || kind == "NS" {
				u = u.Add(name, expression.Value(g.valueOf(kind)))
			} else {
				u = u.Add(name, expression.Value(g.number()))
			}
		case 7:
			u = u.Delete(name, expression.Value(g.valueOf(pickOf(g, []string{"SS", "NS"}))))
		case 8:
			if g.chance(0.3) {
				u = u.Set(name, expression.ListAppend(expression.Name("l"), expression.Value(g.valueOf("L"))))
			} else {
				u = u.Set(name, expression.Name(pickOf(g, []string{"n", "s", "mp", "zz"})))
			}
		case 9:
			if g.chance(0.1) && g.schema.RangeKey != "" {
				u = u.Set(expression.Name(g.schema.RangeKey), expression.Value("x")) // a key attribute: refused
			} else {
				u = u.Add(name, expression.Value(g.value(p)))
			}
		}
	}
	return u, len(used) > 0
}

// bigString returns a string for d that brings an item near 400 KB.
func (g *gen) bigString() AV {
	return &types.AttributeValueMemberS{Value: strings.Repeat("x", 400<<10-200-g.pick(400))}
}

// nearLimit pads it with d so that its size lands within a few bytes of 400 KB.
func nearLimit(g *gen, it Item) {
	delete(it, "d")
	size := ddbmodel.ItemSize(it) + len("d")
	pad := 400<<10 - size + g.pick(9) - 5
	it["d"] = &types.AttributeValueMemberS{Value: strings.Repeat("y", max(pad, 0))}
}

func (g *gen) item(k Item) Item {
	it := Item{}
	for kk, v := range k {
		it[kk] = v
	}
	for range g.pick(6) {
		a := g.attrName()
		it[a] = g.value(a)
	}
	if g.chance(g.big) {
		nearLimit(g, it)
	}
	return it
}

// current returns the model's item at k (strongly consistent).
func (g *gen) current(k Item) Item {
	out, err := g.model.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(g.table), Key: k, ConsistentRead: aws.Bool(true)})
	if err != nil {
		panic(err)
	}
	return out.Item
}

func (g *gen) rvFail() types.ReturnValuesOnConditionCheckFailure {
	if g.chance(0.6) {
		return types.ReturnValuesOnConditionCheckFailureAllOld
	}
	return ""
}

func build(b expression.Builder) (expression.Expression, error) { return b.Build() }

func (g *gen) op() op {
	switch r := g.pick(100); {
	case r < 20:
		return g.putOp()
	case r < 50:
		return g.updateOp()
	case r < 58:
		return g.deleteOp()
	case r < 68:
		return g.getOp()
	case r < 80:
		return g.queryOp()
	default:
		return g.transactOp()
	}
}

func condOrNil(g *gen, p float64) *expression.ConditionBuilder {
	if !g.chance(p) {
		return nil
	}
	c := g.cond(0)
	return &c
}

func (g *gen) putOp() op {
	k := g.key()
	it := g.item(k)
	c := condOrNil(g, 0.5)
	in := &dynamodb.PutItemInput{Item: it, ReturnValuesOnConditionCheckFailure: g.rvFail()}
	in.ReturnValues = pickOf(g, []types.ReturnValue{"", types.ReturnValueNone, types.ReturnValueAllOld, types.ReturnValueAllOld})
	if g.chance(0.02) {
		in.ReturnValues = types.ReturnValueAllNew // refused for PutItem
	}
	var bErr error
	desc := "PutItem " + renderItem(it)
	if c != nil {
		e, err := build(expression.NewBuilder().WithCondition(*c))
		bErr = err
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
		desc += fmt.Sprintf(" if %s names=%v values=%s", aws.ToString(e.Condition()), e.Names(), renderItem(e.Values()))
	}
	desc += " rv=" + string(in.ReturnValues) + " rvf=" + string(in.ReturnValuesOnConditionCheckFailure)
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		in := *in
		in.TableName = aws.String(table)
		out, err := db.PutItem(ctx, &in)
		if err != nil {
			return errResult(err)
		}
		return result{kind: "ok", out: renderItem(out.Attributes)}
	}}
}

func (g *gen) updateOp() op {
	k := g.key()
	u, ok := g.update()
	c := condOrNil(g, 0.5)
	b := expression.NewBuilder()
	if ok {
		b = b.WithUpdate(u)
	}
	if c != nil {
		b = b.WithCondition(*c)
	}
	if g.chance(0.08) {
		// Exactly at the edge: pad d so that the item after the update is near 400 KB.
		cur := g.current(k)
		next := Item{}
		for kk, v := range cur {
			next[kk] = v
		}
		for kk, v := range k {
			next[kk] = v
		}
		nearLimit(g, next)
		b = expression.NewBuilder().WithUpdate(expression.Set(expression.Name("d"), expression.Value(next["d"])))
		ok = true
		c = nil
	}
	in := &dynamodb.UpdateItemInput{Key: k, ReturnValuesOnConditionCheckFailure: g.rvFail(),
		ReturnValues: pickOf(g, []types.ReturnValue{"", types.ReturnValueNone, types.ReturnValueAllOld, types.ReturnValueAllNew, types.ReturnValueUpdatedOld, types.ReturnValueUpdatedNew})}
	var bErr error
	desc := "UpdateItem " + keyString(k)
	if ok || c != nil {
		e, err := build(b)
		bErr = err
		in.UpdateExpression, in.ConditionExpression = e.Update(), e.Condition()
		in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Names(), e.Values()
		desc += fmt.Sprintf(" %q if %q names=%v values=%s", aws.ToString(e.Update()), aws.ToString(e.Condition()), e.Names(), renderItem(e.Values()))
	}
	desc += " rv=" + string(in.ReturnValues) + " rvf=" + string(in.ReturnValuesOnConditionCheckFailure)
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		in := *in
		in.TableName = aws.String(table)
		out, err := db.UpdateItem(ctx, &in)
		if err != nil {
			return errResult(err)
		}
		return result{kind: "ok", out: renderItem(out.Attributes)}
	}}
}

func (g *gen) deleteOp() op {
	k := g.key()
	c := condOrNil(g, 0.6)
	in := &dynamodb.DeleteItemInput{Key: k, ReturnValuesOnConditionCheckFailure: g.rvFail(),
		ReturnValues: pickOf(g, []types.ReturnValue{"", types.ReturnValueNone, types.ReturnValueAllOld})}
	var bErr error
	desc := "DeleteItem " + keyString(k)
	if c != nil {
		e, err := build(expression.NewBuilder().WithCondition(*c))
		bErr = err
		in.ConditionExpression, in.ExpressionAttributeNames, in.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
		desc += fmt.Sprintf(" if %q names=%v values=%s", aws.ToString(e.Condition()), e.Names(), renderItem(e.Values()))
	}
	desc += " rv=" + string(in.ReturnValues)
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		in := *in
		in.TableName = aws.String(table)
		out, err := db.DeleteItem(ctx, &in)
		if err != nil {
			return errResult(err)
		}
		return result{kind: "ok", out: renderItem(out.Attributes)}
	}}
}

func (g *gen) getOp() op {
	k := g.key()
	in := &dynamodb.GetItemInput{Key: k, ConsistentRead: aws.Bool(g.chance(0.5))}
	desc := "GetItem " + keyString(k)
	var bErr error
	if g.chance(0.2) {
		p1, _ := g.path()
		p2, _ := g.path()
		e, err := build(expression.NewBuilder().WithProjection(expression.NamesList(expression.Name(p1), expression.Name(p2))))
		bErr = err
		in.ProjectionExpression, in.ExpressionAttributeNames = e.Projection(), e.Names()
		desc += fmt.Sprintf(" project %q names=%v", aws.ToString(e.Projection()), e.Names())
	}
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		in := *in
		in.TableName = aws.String(table)
		out, err := db.GetItem(ctx, &in)
		if err != nil {
			return errResult(err)
		}
		return result{kind: "ok", out: renderItem(out.Item)}
	}}
}

func (g *gen) queryOp() op {
	pk := pickOf(g, g.pks)
	kc := expression.Key(g.schema.HashKey).Equal(expression.Value(pk))
	desc := "Query " + pk
	if g.schema.RangeKey != "" && g.chance(0.7) {
		sk := expression.Key(g.schema.RangeKey)
		v := pickOf(g, []string{"x", "x#", "x#1", "y", "a", "z"})
		var skc expression.KeyConditionBuilder
		switch g.pick(7) {
		case 0:
			skc = sk.BeginsWith(v)
		case 1:
			skc = sk.Between(expression.Value(v), expression.Value(pickOf(g, []string{"x#2", "y", "z", "a"})))
		case 2:
			skc = sk.Equal(expression.Value(v))
		case 3:
			skc = sk.LessThan(expression.Value(v))
		case 4:
			skc = sk.LessThanEqual(expression.Value(v))
		case 5:
			skc = sk.GreaterThan(expression.Value(v))
		default:
			skc = sk.GreaterThanEqual(expression.Value(v))
		}
		kc = kc.And(skc)
	}
	b := expression.NewBuilder().WithKeyCondition(kc)
	if g.chance(0.2) {
		b = b.WithFilter(g.cond(1))
	}
	e, bErr := build(b)
	in := &dynamodb.QueryInput{KeyConditionExpression: e.KeyCondition(), FilterExpression: e.Filter(),
		ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ConsistentRead: aws.Bool(g.chance(0.5))}
	if g.chance(0.4) {
		in.ScanIndexForward = aws.Bool(g.chance(0.5))
	}
	if g.chance(0.6) {
		in.Limit = aws.Int32(int32(1 + g.pick(4)))
	}
	desc += fmt.Sprintf(" %q filter %q names=%v values=%s forward=%v limit=%v", aws.ToString(e.KeyCondition()), aws.ToString(e.Filter()), e.Names(), renderItem(e.Values()), in.ScanIndexForward == nil || *in.ScanIndexForward, aws.ToInt32(in.Limit))
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		in := *in
		in.TableName = aws.String(table)
		var pages []string
		for range 50 {
			out, err := db.Query(ctx, &in)
			if err != nil {
				r := errResult(err)
				r.out = strings.Join(pages, " | ") + " | " + r.kind
				return r
			}
			var items []string
			for _, it := range out.Items {
				items = append(items, renderItem(it))
			}
			pages = append(pages, fmt.Sprintf("page(count=%d scanned=%d items=[%s] last=%s)", out.Count, out.ScannedCount, strings.Join(items, ", "), renderItem(out.LastEvaluatedKey)))
			if len(out.LastEvaluatedKey) == 0 {
				break
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
		return result{kind: "ok", out: strings.Join(pages, " | ")}
	}}
}

func (g *gen) transactOp() op {
	n := 2 + g.pick(3)
	var items []types.TransactWriteItem
	var descs []string
	var bErr error
	seen := map[string]bool{}
	for range n {
		// Distinct items only: DynamoDB Local evaluates the conditions of a request
		// with two actions on one item (and cancels it when one fails) where the
		// service refuses it outright, as the model does.
		k := g.key()
		for try := 0; seen[keyString(k)] && try < 8; try++ {
			k = g.key()
		}
		if seen[keyString(k)] {
			continue
		}
		seen[keyString(k)] = true
		rvf := g.rvFail()
		var ti types.TransactWriteItem
		switch g.pick(4) {
		case 0:
			e, err := build(expression.NewBuilder().WithCondition(g.cond(0)))
			bErr = errors.Join(bErr, err)
			ti.ConditionCheck = &types.ConditionCheck{Key: k, ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ReturnValuesOnConditionCheckFailure: rvf}
			descs = append(descs, fmt.Sprintf("Check %s if %q names=%v values=%s", keyString(k), aws.ToString(e.Condition()), e.Names(), renderItem(e.Values())))
		case 1:
			it := g.item(k)
			p := &types.Put{Item: it, ReturnValuesOnConditionCheckFailure: rvf}
			d := "Put " + renderItem(it)
			if c := condOrNil(g, 0.6); c != nil {
				e, err := build(expression.NewBuilder().WithCondition(*c))
				bErr = errors.Join(bErr, err)
				p.ConditionExpression, p.ExpressionAttributeNames, p.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
				d += fmt.Sprintf(" if %q names=%v values=%s", aws.ToString(e.Condition()), e.Names(), renderItem(e.Values()))
			}
			ti.Put = p
			descs = append(descs, d)
		case 2:
			u, ok := g.update()
			if !ok {
				u = expression.Set(expression.Name("n"), expression.Value(g.number()))
			}
			b := expression.NewBuilder().WithUpdate(u)
			if c := condOrNil(g, 0.6); c != nil {
				b = b.WithCondition(*c)
			}
			e, err := build(b)
			bErr = errors.Join(bErr, err)
			ti.Update = &types.Update{Key: k, UpdateExpression: e.Update(), ConditionExpression: e.Condition(), ExpressionAttributeNames: e.Names(), ExpressionAttributeValues: e.Values(), ReturnValuesOnConditionCheckFailure: rvf}
			descs = append(descs, fmt.Sprintf("Update %s %q if %q names=%v values=%s", keyString(k), aws.ToString(e.Update()), aws.ToString(e.Condition()), e.Names(), renderItem(e.Values())))
		default:
			d := &types.Delete{Key: k, ReturnValuesOnConditionCheckFailure: rvf}
			ds := "Delete " + keyString(k)
			if c := condOrNil(g, 0.6); c != nil {
				e, err := build(expression.NewBuilder().WithCondition(*c))
				bErr = errors.Join(bErr, err)
				d.ConditionExpression, d.ExpressionAttributeNames, d.ExpressionAttributeValues = e.Condition(), e.Names(), e.Values()
				ds += fmt.Sprintf(" if %q names=%v values=%s", aws.ToString(e.Condition()), e.Names(), renderItem(e.Values()))
			}
			ti.Delete = d
			descs = append(descs, ds)
		}
		items = append(items, ti)
	}
	desc := "TransactWriteItems [" + strings.Join(descs, "; ") + "]"
	return op{desc: desc, run: func(ctx context.Context, db api, table string) result {
		if bErr != nil {
			return result{kind: "BuildError", msg: bErr.Error()}
		}
		tis := make([]types.TransactWriteItem, len(items))
		for i, ti := range items {
			switch {
			case ti.ConditionCheck != nil:
				c := *ti.ConditionCheck
				c.TableName = aws.String(table)
				tis[i].ConditionCheck = &c
			case ti.Put != nil:
				c := *ti.Put
				c.TableName = aws.String(table)
				tis[i].Put = &c
			case ti.Update != nil:
				c := *ti.Update
				c.TableName = aws.String(table)
				tis[i].Update = &c
			case ti.Delete != nil:
				c := *ti.Delete
				c.TableName = aws.String(table)
				tis[i].Delete = &c
			}
		}
		_, err := db.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{TransactItems: tis})
		if err != nil {
			return errResult(err)
		}
		return result{kind: "ok"}
	}}
}

// debugSizes logs the model's items and their sizes (in verbose replays of queries).
func debugSizes(t *testing.T, db *ddbmodel.DB, table string) {
	for _, it := range db.Table(table).Items() {
		k := Item{}
		for _, n := range []string{"pk", "sk", "id"} {
			if v, ok := it[n]; ok {
				k[n] = v
			}
		}
		t.Logf("   model item %s: %d bytes", renderItem(k), ddbmodel.ItemSize(it))
	}
}
