// Package testenv is the harness of every integration test in the repository: one local
// DynamoDB engine per test process and tables created from template.yaml.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestSomething(t *testing.T) {
//		client := testenv.Client(t)
//		table := testenv.Table(t, "LockTable") // unique name, deleted at cleanup
//		...
//	}
//
// When DYNAMODB_ENDPOINT is set, that engine is used and nothing is started. Otherwise Main
// fetches (once, cached in .cache/dynamodb-local) and starts DynamoDB Local, and stops it
// when the tests are done. An engine that cannot be had fails the run: tests never skip.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
	"github.com/turnstile-locks/turnstile/internal/template"
)

// EnvEndpoint names the variable holding the engine's endpoint.
const EnvEndpoint = ddblocal.EnvEndpoint

// pingTimeout bounds the reachability check of Client and StreamsClient.
const pingTimeout = 5 * time.Second

// Runner runs a package's tests: *testing.M, or a wrapper that checks something after
// them (policycheck.Run).
type Runner interface{ Run() int }

// Main runs the tests of a package against a local engine and exits; call it from TestMain.
func Main(m Runner) {
	os.Exit(run(m))
}

func run(m Runner) int {
	if os.Getenv(EnvEndpoint) != "" {
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	engine, err := ddblocal.Start(ctx, ddblocal.Options{})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: cannot start the local DynamoDB engine: %v\n"+
			"testenv: install Java 17+ and Maven, or set %s to a running engine (make engine)\n",
			err, EnvEndpoint)
		return 1
	}
	if err := os.Setenv(EnvEndpoint, engine.Endpoint()); err != nil {
		_ = engine.Stop()
		fmt.Fprintf(os.Stderr, "testenv: set %s: %v\n", EnvEndpoint, err)
		return 1
	}
	// Stop the engine on an interrupt too (it also dies with this process: see ddblocal).
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		if _, ok := <-sigs; ok {
			_ = engine.Stop()
			os.Exit(1)
		}
	}()

	code := m.Run()

	signal.Stop(sigs)
	close(sigs)
	if err := engine.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: stop engine: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Endpoint returns the engine's endpoint (DYNAMODB_ENDPOINT), "" outside Main.
func Endpoint() string { return os.Getenv(EnvEndpoint) }

func endpoint(t testing.TB) string {
	t.Helper()
	e := Endpoint()
	if e == "" {
		t.Fatalf("testenv: %s is not set: call testenv.Main from TestMain or set it", EnvEndpoint)
	}
	return e
}

// Client returns a DynamoDB client for the engine after checking that it answers
// ListTables within a few seconds; it fails the test naming the endpoint otherwise. Calls
// that cannot reach the engine fail within seconds with an error naming the endpoint
// (a *ddblocal.UnreachableError in the chain).
func Client(t testing.TB) *dynamodb.Client {
	t.Helper()
	e := endpoint(t)
	client, err := ddblocal.NewClient(context.Background(), e)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	if err := ddblocal.PingClient(context.Background(), client, pingTimeout); err != nil {
		t.Fatalf("DynamoDB engine at %s is unreachable: %v", e, cause(err))
	}
	return client
}

// cause strips the UnreachableError wrapper, whose message would repeat the endpoint.
func cause(err error) error {
	var u *ddblocal.UnreachableError
	if errors.As(err, &u) {
		return u.Err
	}
	return err
}

// StreamsClient returns a DynamoDB Streams client for the engine (checked like Client).
func StreamsClient(t testing.TB) *dynamodbstreams.Client {
	t.Helper()
	e := endpoint(t)
	if err := ddblocal.Ping(context.Background(), e, pingTimeout); err != nil {
		t.Fatalf("DynamoDB engine at %s is unreachable: %v", e, cause(err))
	}
	client, err := ddblocal.NewStreamsClient(context.Background(), e)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return client
}

var loadTemplate = sync.OnceValues(template.LoadDefault)

// Template returns the project's template.yaml, parsed once per process.
func Template(t testing.TB) *template.Template {
	t.Helper()
	tpl, err := loadTemplate()
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	return tpl
}

// Table creates the table of template resource logicalID under a unique name
// (<logicalID>-<8 hex chars>), enables its TTL, waits until it is ACTIVE and deletes it when
// the test ends. It returns the table name.
func Table(t testing.TB, logicalID string) string {
	t.Helper()
	spec, err := Template(t).Table(logicalID)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	client := Client(t)
	name := logicalID + "-" + randomHex(4)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ddblocal.CreateTable(ctx, client, spec.CreateTableInput(name), spec.TTLInput(name)); err != nil {
		t.Fatalf("testenv: template table %s: %v", logicalID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := client.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
		var notFound *types.ResourceNotFoundException
		if err != nil && !errors.As(err, &notFound) {
			t.Errorf("testenv: delete table %s: %v", name, err)
		}
	})
	return name
}

// Tables creates the tables of several template resources (see Table) and returns their
// names by logical id.
func Tables(t testing.TB, logicalIDs ...string) map[string]string {
	t.Helper()
	names := make(map[string]string, len(logicalIDs))
	for _, id := range logicalIDs {
		names[id] = Table(t, id)
	}
	return names
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err) // crypto/rand.Read does not fail on supported platforms
	}
	return hex.EncodeToString(b)
}
