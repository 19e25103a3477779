package ddblocal

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// EnvEndpoint names the environment variable that points tests, the demo and the tools at
// a running engine instead of starting one.
const EnvEndpoint = "DYNAMODB_ENDPOINT"

// Region is the region local clients sign for; DynamoDB Local accepts any.
const Region = "us-east-1"

// Timeouts and retries of local clients: a dead or hung engine must fail a call within
// seconds, never hang it.
const (
	DialTimeout           = 2 * time.Second
	ResponseHeaderTimeout = 5 * time.Second
	MaxAttempts           = 3
	MaxBackoff            = 500 * time.Millisecond
)

// Config returns an aws.Config for a local engine at endpoint: static credentials
// "local"/"local", region us-east-1, bounded retries without a retry quota, and HTTP
// timeouts of a few seconds. Nothing is read from the environment or ~/.aws.
func Config(endpoint string) aws.Config {
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = DialTimeout }).
		WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = ResponseHeaderTimeout
			t.TLSHandshakeTimeout = DialTimeout
			t.MaxIdleConnsPerHost = 64
		})
	return aws.Config{
		Region:       Region,
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		HTTPClient:   httpClient,
		BaseEndpoint: aws.String(endpoint),
		Retryer: func() aws.Retryer {
			return retry.NewStandard(func(o *retry.StandardOptions) {
				o.MaxAttempts = MaxAttempts
				o.MaxBackoff = MaxBackoff
				o.RateLimiter = ratelimit.None
			})
		},
		APIOptions: []func(*middleware.Stack) error{endpointErrors(endpoint)},
	}
}

// NewClient returns a DynamoDB client for the local engine at endpoint (see Config).
// Errors from calls that could not reach the engine name the endpoint. optFns may adjust
// the client options. Nothing is loaded, so the context is currently unused.
func NewClient(_ context.Context, endpoint string, optFns ...func(*dynamodb.Options)) (*dynamodb.Client, error) {
	if endpoint == "" {
		return nil, errors.New("new DynamoDB client: empty endpoint")
	}
	return dynamodb.NewFromConfig(Config(endpoint), optFns...), nil
}

// NewStreamsClient returns a DynamoDB Streams client for the local engine at endpoint.
func NewStreamsClient(_ context.Context, endpoint string, optFns ...func(*dynamodbstreams.Options)) (*dynamodbstreams.Client, error) {
	if endpoint == "" {
		return nil, errors.New("new DynamoDB Streams client: empty endpoint")
	}
	return dynamodbstreams.NewFromConfig(Config(endpoint), optFns...), nil
}

// Ping checks that the engine at endpoint answers ListTables within timeout (one attempt).
func Ping(ctx context.Context, endpoint string, timeout time.Duration) error {
	client, err := NewClient(ctx, endpoint, func(o *dynamodb.Options) {
		o.RetryMaxAttempts = 1
	})
	if err != nil {
		return err
	}
	return PingClient(ctx, client, timeout)
}

// PingClient checks that client's engine answers ListTables within timeout.
func PingClient(ctx context.Context, client *dynamodb.Client, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := client.ListTables(ctx, &dynamodb.ListTablesInput{Limit: aws.Int32(1)})
	return err
}

// UnreachableError is returned (wrapped in the SDK's operation error) by calls of local
// clients that could not get an answer from the engine.
type UnreachableError struct {
	Endpoint string
	Err      error
}

func (e *UnreachableError) Error() string {
	return fmt.Sprintf("DynamoDB engine at %s is unreachable: %v", e.Endpoint, e.Err)
}

func (e *UnreachableError) Unwrap() error { return e.Err }

// endpointErrors adds an outermost middleware that wraps transport failures (after all
// retries) in an UnreachableError naming the endpoint. Service errors such as
// ConditionalCheckFailedException pass through unchanged.
func endpointErrors(endpoint string) func(*middleware.Stack) error {
	return func(stack *middleware.Stack) error {
		return stack.Initialize.Add(middleware.InitializeMiddlewareFunc("turnstileEndpointErrors",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
				middleware.InitializeOutput, middleware.Metadata, error,
			) {
				out, md, err := next.HandleInitialize(ctx, in)
				if err != nil && isTransportError(err) {
					err = &UnreachableError{Endpoint: endpoint, Err: err}
				}
				return out, md, err
			}), middleware.Before)
	}
}

func isTransportError(err error) bool {
	var sendErr *smithyhttp.RequestSendError
	var netErr net.Error
	return errors.As(err, &sendErr) || errors.As(err, &netErr)
}

// CreateTable creates a table, waits until it is ACTIVE and, when ttl is not nil, enables
// its TTL. With template.TableSpec: CreateTable(ctx, c, spec.CreateTableInput(n), spec.TTLInput(n)).
func CreateTable(ctx context.Context, client *dynamodb.Client, in *dynamodb.CreateTableInput,
	ttl *dynamodb.UpdateTimeToLiveInput,
) error {
	name := aws.ToString(in.TableName)
	if _, err := client.CreateTable(ctx, in); err != nil {
		return fmt.Errorf("create table %s: %w", name, err)
	}
	waiter := dynamodb.NewTableExistsWaiter(client, func(o *dynamodb.TableExistsWaiterOptions) {
		o.MinDelay = 50 * time.Millisecond
		o.MaxDelay = time.Second
	})
	if err := waiter.Wait(ctx, &dynamodb.DescribeTableInput{TableName: in.TableName}, time.Minute); err != nil {
		return fmt.Errorf("wait for table %s: %w", name, err)
	}
	if ttl != nil {
		if _, err := client.UpdateTimeToLive(ctx, ttl); err != nil {
			return fmt.Errorf("enable TTL on %s: %w", name, err)
		}
	}
	return nil
}
