package testenv_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/testenv"
	"github.com/turnstile-locks/turnstile/lockcore"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// TestTablesMatchTemplate creates every table of template.yaml and checks that the engine
// reports the template's keys, attribute types, TTL attribute and stream.
func TestTablesMatchTemplate(t *testing.T) {
	specs, err := testenv.Template(t).Tables()
	if err != nil {
		t.Fatal(err)
	}
	if len(specs) == 0 {
		t.Fatal("template.yaml has no AWS::DynamoDB::Table resources")
	}
	client := testenv.Client(t)
	for _, spec := range specs {
		t.Run(spec.LogicalID, func(t *testing.T) {
			t.Parallel()
			name := testenv.Table(t, spec.LogicalID)
			if !strings.HasPrefix(name, spec.LogicalID+"-") || len(name) != len(spec.LogicalID)+9 {
				t.Errorf("table name %q, want %s-<8 random chars>", name, spec.LogicalID)
			}
			ctx := t.Context()
			desc, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)})
			if err != nil {
				t.Fatal(err)
			}
			td := desc.Table
			if td.TableStatus != types.TableStatusActive {
				t.Errorf("status %s, want ACTIVE", td.TableStatus)
			}
			if got, want := keys(td.KeySchema), keys(spec.KeySchema); got != want {
				t.Errorf("key schema %s, want %s", got, want)
			}
			if got, want := attrs(td.AttributeDefinitions), attrs(spec.AttributeDefinitions); got != want {
				t.Errorf("attribute definitions %s, want %s", got, want)
			}

			ttl, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
			if err != nil {
				t.Fatal(err)
			}
			d := ttl.TimeToLiveDescription
			if spec.TTLAttribute != "" {
				if d.TimeToLiveStatus != types.TimeToLiveStatusEnabled && d.TimeToLiveStatus != types.TimeToLiveStatusEnabling {
					t.Errorf("TTL status %s, want ENABLED", d.TimeToLiveStatus)
				}
				if got := aws.ToString(d.AttributeName); got != spec.TTLAttribute {
					t.Errorf("TTL attribute %q, want %q", got, spec.TTLAttribute)
				}
			} else if d.TimeToLiveStatus == types.TimeToLiveStatusEnabled {
				t.Errorf("TTL enabled on %q, template has none", aws.ToString(d.AttributeName))
			}

			ss := td.StreamSpecification
			if spec.StreamViewType != "" {
				if ss == nil || !aws.ToBool(ss.StreamEnabled) || ss.StreamViewType != spec.StreamViewType {
					t.Errorf("stream %+v, want enabled with %s", ss, spec.StreamViewType)
				}
				if aws.ToString(td.LatestStreamArn) == "" {
					t.Error("no LatestStreamArn")
				}
			} else if ss != nil && aws.ToBool(ss.StreamEnabled) {
				t.Errorf("stream enabled (%s), template has none", ss.StreamViewType)
			}
		})
	}
}

// TestLockTable pins what the lock strategies rely on, independently of the generic check.
func TestLockTable(t *testing.T) {
	spec, err := testenv.Template(t).Table("LockTable")
	if err != nil {
		t.Fatal(err)
	}
	if spec.HashKey() != "pk" || spec.RangeKey() != "sk" || spec.TTLAttribute != "expiresAt" ||
		spec.StreamViewType != types.StreamViewTypeOldImage {
		t.Fatalf("LockTable spec %+v, want pk/sk, TTL expiresAt, OLD_IMAGE stream", spec)
	}
	names := testenv.Tables(t, "LockTable", "OrdersTable")
	if len(names) != 2 || names["LockTable"] == names["OrdersTable"] {
		t.Fatalf("Tables = %v", names)
	}
	desc, err := testenv.Client(t).DescribeTable(t.Context(),
		&dynamodb.DescribeTableInput{TableName: aws.String(names["LockTable"])})
	if err != nil {
		t.Fatal(err)
	}
	streams := testenv.StreamsClient(t)
	sd, err := streams.DescribeStream(t.Context(),
		&dynamodbstreams.DescribeStreamInput{StreamArn: desc.Table.LatestStreamArn})
	if err != nil {
		t.Fatal(err)
	}
	if got := sd.StreamDescription.StreamViewType; string(got) != string(types.StreamViewTypeOldImage) {
		t.Errorf("stream view type %s, want OLD_IMAGE", got)
	}
}

// TestCreateLockTableMatchesTemplate: the table lockcore.CreateLockTable makes for
// adopters is the template's LockTable (keys, key types, TTL attribute, stream view).
func TestCreateLockTableMatchesTemplate(t *testing.T) {
	spec, err := testenv.Template(t).Table("LockTable")
	if err != nil {
		t.Fatal(err)
	}
	db := testenv.Client(t)
	name := fmt.Sprintf("created-locks-%d", time.Now().UnixNano())
	t.Cleanup(func() {
		_, _ = db.DeleteTable(context.Background(), &dynamodb.DeleteTableInput{TableName: aws.String(name)})
	})
	if err := lockcore.CreateLockTable(t.Context(), db, name, lockcore.WithStream()); err != nil {
		t.Fatal(err)
	}
	desc, err := db.DescribeTable(t.Context(), &dynamodb.DescribeTableInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	want := spec.CreateTableInput(name)
	keys := func(ks []types.KeySchemaElement, defs []types.AttributeDefinition) string {
		typ := map[string]types.ScalarAttributeType{}
		for _, d := range defs {
			typ[aws.ToString(d.AttributeName)] = d.AttributeType
		}
		var out []string
		for _, k := range ks {
			out = append(out, fmt.Sprintf("%s:%s:%s", aws.ToString(k.AttributeName), k.KeyType, typ[aws.ToString(k.AttributeName)]))
		}
		return strings.Join(out, ",")
	}
	if got, w := keys(desc.Table.KeySchema, desc.Table.AttributeDefinitions), keys(want.KeySchema, want.AttributeDefinitions); got != w {
		t.Errorf("keys %s, template %s", got, w)
	}
	if desc.Table.StreamSpecification == nil || desc.Table.StreamSpecification.StreamViewType != spec.StreamViewType {
		t.Errorf("stream %+v, template %s", desc.Table.StreamSpecification, spec.StreamViewType)
	}
	ttl, err := db.DescribeTimeToLive(t.Context(), &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(name)})
	if err != nil {
		t.Fatal(err)
	}
	if got := aws.ToString(ttl.TimeToLiveDescription.AttributeName); got != spec.TTLAttribute {
		t.Errorf("TTL attribute %q, template %q", got, spec.TTLAttribute)
	}
}

// TestEngineDeath checks that a dead engine makes calls fail fast with an error naming its
// endpoint instead of hanging.
func TestEngineDeath(t *testing.T) {
	ctx := t.Context()
	engine, err := ddblocal.Start(ctx, ddblocal.Options{})
	if err != nil {
		t.Fatalf("start second engine: %v", err)
	}
	t.Cleanup(func() { _ = engine.Stop() })
	if engine.Endpoint() == testenv.Endpoint() {
		t.Fatalf("second engine shares the endpoint %s", engine.Endpoint())
	}
	client, err := ddblocal.NewClient(ctx, engine.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("second engine does not answer: %v", err)
	}

	if err := engine.Kill(); err != nil {
		t.Fatal(err)
	}
	callCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	_, err = client.DescribeTable(callCtx, &dynamodb.DescribeTableInput{TableName: aws.String("any")})
	elapsed := time.Since(start)
	if err == nil {
		t.Fatal("call to a dead engine succeeded")
	}
	t.Logf("after %v: %v", elapsed, err)
	if elapsed > 15*time.Second {
		t.Errorf("call to a dead engine took %v, want < 15s", elapsed)
	}
	if !strings.Contains(err.Error(), engine.Endpoint()) {
		t.Errorf("error %q does not name the endpoint %s", err, engine.Endpoint())
	}
	var unreachable *ddblocal.UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Endpoint != engine.Endpoint() {
		t.Errorf("error %v is not an UnreachableError for %s", err, engine.Endpoint())
	}
	// The engine of the test process is unaffected.
	if _, err := testenv.Client(t).ListTables(ctx, &dynamodb.ListTablesInput{}); err != nil {
		t.Errorf("test engine: %v", err)
	}
}

func keys(ks []types.KeySchemaElement) string {
	var s []string
	for _, k := range ks {
		s = append(s, aws.ToString(k.AttributeName)+":"+string(k.KeyType))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

func attrs(ds []types.AttributeDefinition) string {
	var s []string
	for _, d := range ds {
		s = append(s, aws.ToString(d.AttributeName)+":"+string(d.AttributeType))
	}
	sort.Strings(s)
	return strings.Join(s, ",")
}

// fatalRecorder is a testing.TB whose Fatalf records the message and ends the goroutine.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (f *fatalRecorder) Helper() {}

func (f *fatalRecorder) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// TestClientUnreachable checks that Client fails the test quickly, naming the endpoint,
// when nothing answers there.
func TestClientUnreachable(t *testing.T) {
	port, err := ddblocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	dead := "http://127.0.0.1:" + strconv.Itoa(port)
	t.Setenv(testenv.EnvEndpoint, dead)

	rec := &fatalRecorder{TB: t}
	done := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(done)
		testenv.Client(rec)
		t.Error("Client returned for a dead engine")
	}()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("Client did not give up on a dead engine within 15s")
	}
	want := "DynamoDB engine at " + dead + " is unreachable: "
	if !strings.HasPrefix(rec.msg, want) {
		t.Errorf("Fatalf message %q, want prefix %q", rec.msg, want)
	}
	t.Logf("after %v: %s", time.Since(start), rec.msg)
}
