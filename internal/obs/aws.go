package obs

import (
	"context"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/feature/ec2/imds"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
)

// EndpointEnv names the variable that points the DynamoDB and DynamoDB Streams clients at
// another engine speaking the DynamoDB API (DynamoDB Local, ScyllaDB Alternator), e.g.
// http://127.0.0.1:8000.
const EndpointEnv = "DYNAMODB_ENDPOINT"

// Credentials and region used with a DYNAMODB_ENDPOINT when nothing else is configured.
// DynamoDB Local accepts any credentials.
const (
	LocalAccessKeyID     = "local"
	LocalSecretAccessKey = "local"
	LocalRegion          = "us-east-1"
)

// AWSConfig loads the default AWS configuration (environment, shared files, the Lambda
// execution role) and adapts it:
//
//   - With DYNAMODB_ENDPOINT set, every DynamoDB and DynamoDB Streams client made from the
//     config (dynamodb.NewFromConfig, dynamodbstreams.NewFromConfig) sends its requests there;
//     other services keep their normal endpoints. When no credentials are configured in the
//     environment or a profile, static local credentials are used, the region defaults to
//     us-east-1, and the EC2 instance metadata service is never probed.
//   - Inside Lambda with tracing, the SDK clients are instrumented for X-Ray (see
//     InstrumentAWS).
func AWSConfig(ctx context.Context, optFns ...func(*config.LoadOptions) error) (aws.Config, error) {
	endpoint := os.Getenv(EndpointEnv)
	var opts []func(*config.LoadOptions) error
	if endpoint != "" {
		opts = append(opts, config.WithEC2IMDSClientEnableState(imds.ClientDisabled))
		if !credentialsConfigured() {
			opts = append(opts, config.WithCredentialsProvider(
				credentials.NewStaticCredentialsProvider(LocalAccessKeyID, LocalSecretAccessKey, "")))
		}
	}
	opts = append(opts, optFns...)
	cfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("obs: loading AWS config: %w", err)
	}
	if endpoint != "" {
		if cfg.Region == "" {
			cfg.Region = LocalRegion
		}
		cfg.ServiceOptions = append(cfg.ServiceOptions, dynamoDBEndpoint(endpoint))
	}
	InstrumentAWS(&cfg)
	return cfg, nil
}

// credentialsConfigured reports whether the environment names credentials or a profile that
// the default chain would use, so a local endpoint can fall back to static credentials
// without guessing (and without probing instance metadata).
func credentialsConfigured() bool {
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_PROFILE", "AWS_WEB_IDENTITY_TOKEN_FILE",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI"} {
		if os.Getenv(k) != "" {
			return true
		}
	}
	return false
}

// dynamoDBEndpoint returns a service option that sets the base endpoint of the DynamoDB and
// DynamoDB Streams clients only.
func dynamoDBEndpoint(endpoint string) func(serviceID string, options any) {
	return func(_ string, options any) {
		switch o := options.(type) {
		case *dynamodb.Options:
			o.BaseEndpoint = aws.String(endpoint)
		case *dynamodbstreams.Options:
			o.BaseEndpoint = aws.String(endpoint)
		}
	}
}
