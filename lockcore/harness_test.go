package lockcore_test

// The test harness of the lockcore module: the tests run against a real DynamoDB engine
// named by DYNAMODB_ENDPOINT (make test starts DynamoDB Local for them with
// `go run ./cmd/ddblocal exec`; make engine starts one by hand). Without an engine the run
// fails: tests never skip.

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/turnstile-locks/turnstile/lockcore"
)

const endpointEnv = "DYNAMODB_ENDPOINT"

func TestMain(m *testing.M) {
	if os.Getenv(endpointEnv) == "" {
		fmt.Fprintf(os.Stderr, "lockcore: the tests need a DynamoDB engine: set %s (`make engine` prints one), "+
			"or run them with `make test`, which starts DynamoDB Local for them\n", endpointEnv)
		os.Exit(1)
	}
	os.Exit(m.Run())
}

// newClient returns a DynamoDB client for the engine at endpoint with static credentials
// and HTTP timeouts of a few seconds (a stopped engine fails calls, it does not hang them).
func newClient(endpoint string) *dynamodb.Client {
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = 2 * time.Second }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = 15 * time.Second
			t.MaxIdleConnsPerHost = 64
		})
	return dynamodb.New(dynamodb.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(endpoint),
		HTTPClient:   httpClient,
		Credentials: aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
			return aws.Credentials{AccessKeyID: "local", SecretAccessKey: "local", Source: "lockcore tests"}, nil
		}),
	})
}

// engineClient returns a client for the test engine; it fails the test when the engine
// does not answer.
func engineClient(t testing.TB) *dynamodb.Client {
	t.Helper()
	endpoint := os.Getenv(endpointEnv)
	db := newClient(endpoint)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := db.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)}); err != nil {
		t.Fatalf("DynamoDB engine at %s (%s) does not answer: %v", endpoint, endpointEnv, err)
	}
	return db
}

func uniqueName(prefix string) string {
	b := make([]byte, 5)
	_, _ = rand.Read(b)
	return prefix + "-" + hex.EncodeToString(b)
}

// lockTable creates a lock table with a unique name, deleted when the test ends.
func lockTable(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	name := uniqueName("lockcore-locks")
	if err := lockcore.CreateLockTable(context.Background(), db, name); err != nil {
		t.Fatalf("create lock table: %v", err)
	}
	t.Cleanup(func() { deleteTable(db, name) })
	return name
}

// dataTable creates a table with string keys pk (hash) and sk (range), deleted when the
// test ends.
func dataTable(t testing.TB, db *dynamodb.Client) string {
	t.Helper()
	name := uniqueName("lockcore-data")
	if err := createDataTable(context.Background(), db, name); err != nil {
		t.Fatalf("create data table: %v", err)
	}
	t.Cleanup(func() { deleteTable(db, name) })
	return name
}

func createDataTable(ctx context.Context, db *dynamodb.Client, name string) error {
	_, err := db.CreateTable(ctx, &dynamodb.CreateTableInput{
		TableName: aws.String(name),
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String("pk"), AttributeType: types.ScalarAttributeTypeS},
			{AttributeName: aws.String("sk"), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String("pk"), KeyType: types.KeyTypeHash},
			{AttributeName: aws.String("sk"), KeyType: types.KeyTypeRange},
		},
		BillingMode: types.BillingModePayPerRequest,
	})
	if err != nil {
		return err
	}
	return dynamodb.NewTableExistsWaiter(db).Wait(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(name)}, time.Minute)
}

func deleteTable(db *dynamodb.Client, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = db.DeleteTable(ctx, &dynamodb.DeleteTableInput{TableName: aws.String(name)})
}
