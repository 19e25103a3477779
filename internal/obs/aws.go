package obs

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"regexp"
	"strings"

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
//   - Inside Lambda with tracing, the SDK clients are traced with X-Ray or OpenTelemetry
//     (see InstrumentAWS).
//   - Inside Lambda (see InLambda), an endpoint override that is not a loopback address is
//     refused with an error (see CheckEndpointOverrides): whoever can change a function's
//     environment must not be able to send its signed requests, and the data they carry,
//     to another host. Under `sam local invoke` DYNAMODB_ENDPOINT may also be DockerEndpoint.
//   - The SDK's log messages go to Logger() (JSON, with the request id), through SDKLogger.
func AWSConfig(ctx context.Context, optFns ...func(*config.LoadOptions) error) (aws.Config, error) {
	if err := CheckEndpointOverrides(); err != nil {
		return aws.Config{}, err
	}
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
	cfg.Logger = SDKLogger(Logger())
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

// EndpointOverrideEnvs are the variables that redirect the functions' AWS clients:
// DYNAMODB_ENDPOINT (ours) and the SDK's own service endpoint variables for the services
// the functions call.
var EndpointOverrideEnvs = []string{
	EndpointEnv,
	"AWS_ENDPOINT_URL",
	"AWS_ENDPOINT_URL_DYNAMODB",
	"AWS_ENDPOINT_URL_DYNAMODB_STREAMS",
	"AWS_ENDPOINT_URL_SQS",
}

// DockerEndpoint is the one DYNAMODB_ENDPOINT besides loopback that a function accepts inside
// Lambda, and only under `sam local invoke` (see SAMLocal): DynamoDB Local running as the
// container named dynamodb-local on the user-defined Docker network that `sam local invoke
// --docker-network` attaches the function's container to (docs/local-invoke.md). Inside that
// container 127.0.0.1 is the container itself, so the loopback rule alone leaves Docker users
// only --docker-network host, which Docker Desktop does not offer everywhere. The value is
// compared exactly: no other name, port or scheme.
const DockerEndpoint = "http://dynamodb-local:8000"

// SAMLocal reports whether the process runs in the Lambda container of `sam local invoke`
// (or `sam local start-lambda`): SAM CLI sets AWS_SAM_LOCAL=true there, and its log stream
// name is not one Lambda gives. AWS_SAM_LOCAL alone could be added to a deployed function's
// environment; AWS_LAMBDA_LOG_STREAM_NAME cannot: it is a reserved variable, which a
// function's configuration can neither set nor change, and Lambda names every execution
// environment's stream "YYYY/MM/DD/[<version>]<id>" (LambdaLogStream), while SAM CLI sets
// "$LATEST". (SAM CLI also sets AWS_LAMBDA_INITIALIZATION_TYPE=on-demand, as Lambda does, so
// that variable tells nothing; cmd/invoke's TestDockerEnvVarsFile runs this check on the
// environment SAM CLI's pinned version builds, testdata/sam-local-env.json.)
func SAMLocal() bool {
	return os.Getenv("AWS_SAM_LOCAL") == "true" && !LambdaLogStream.MatchString(os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"))
}

// LambdaLogStream matches the log stream names Lambda gives execution environments, e.g.
// "2026/11/28/[$LATEST]0123456789abcdef0123456789abcdef".
var LambdaLogStream = regexp.MustCompile(`^[0-9]{4}/[0-9]{2}/[0-9]{2}/\[`)

// InLambda reports whether the process runs as a Lambda function (or in an emulation of
// the Lambda runtime, such as cmd/invoke's): the runtime sets AWS_LAMBDA_FUNCTION_NAME and
// AWS_LAMBDA_RUNTIME_API.
func InLambda() bool {
	return os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" || os.Getenv("AWS_LAMBDA_RUNTIME_API") != ""
}

// CheckEndpointOverrides returns an error when the process runs in Lambda (InLambda) and an
// endpoint override of EndpointOverrideEnvs points anywhere but a loopback address
// (127.0.0.0/8, ::1 or the name localhost). The one exception is DYNAMODB_ENDPOINT set to
// exactly DockerEndpoint under `sam local invoke` (SAMLocal). Outside Lambda every endpoint
// is allowed: developers point the tools at DynamoDB Local, Alternator or a test account. An
// empty value is no override (the template declares DYNAMODB_ENDPOINT empty, so that
// `sam local invoke --env-vars` may set it; deployed, it stays empty and the functions use
// the regional endpoint).
func CheckEndpointOverrides() error {
	if !InLambda() {
		return nil
	}
	for _, k := range EndpointOverrideEnvs {
		v := os.Getenv(k)
		if v == "" {
			continue
		}
		if k == EndpointEnv && v == DockerEndpoint {
			if SAMLocal() {
				continue
			}
			return fmt.Errorf("obs: %s=%q refused inside Lambda: that endpoint is accepted only under sam local invoke (AWS_SAM_LOCAL=true, and a log stream name Lambda does not give, AWS_LAMBDA_LOG_STREAM_NAME=%q)", k, v, os.Getenv("AWS_LAMBDA_LOG_STREAM_NAME"))
		}
		if err := loopbackURL(v); err != nil {
			return fmt.Errorf("obs: %s=%q refused inside Lambda: %w; only a loopback endpoint (127.0.0.0/8, ::1, localhost) may override the AWS endpoints there, or %s=%s under sam local invoke (docs/local-invoke.md)", k, v, err, EndpointEnv, DockerEndpoint)
		}
	}
	return nil
}

// loopbackURL checks that raw is an http or https URL whose host is a loopback address.
func loopbackURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("not a URL: %w", err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return fmt.Errorf("scheme %q, want http or https", u.Scheme)
	}
	host := u.Hostname()
	if host == "" {
		return fmt.Errorf("no host")
	}
	if strings.EqualFold(host, "localhost") {
		return nil
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return fmt.Errorf("host %q is a name other than localhost (names can resolve anywhere)", host)
	}
	if !ip.IsLoopback() {
		return fmt.Errorf("host %s is not a loopback address", host)
	}
	return nil
}
