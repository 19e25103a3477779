package obs

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodbstreams"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

func TestHandlerAddsRequestID(t *testing.T) {
	tests := []struct {
		name      string
		ctx       context.Context
		wantReqID string
	}{
		{"in an invocation", lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "8476a536-e9f4-11e8-9739-2dfe598c3fcd"}), "8476a536-e9f4-11e8-9739-2dfe598c3fcd"},
		{"outside an invocation", context.Background(), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(NewHandler(&buf, slog.LevelInfo)).With("fn", "orderprocessor")
			log.InfoContext(tt.ctx, "order reserved", "orderId", "ord-1001")
			log.DebugContext(tt.ctx, "not shown")
			var rec map[string]any
			if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
				t.Fatalf("not one JSON record: %v\n%s", err, buf.String())
			}
			if rec["message"] != "order reserved" || rec["level"] != "INFO" || rec["orderId"] != "ord-1001" || rec["fn"] != "orderprocessor" {
				t.Errorf("record = %v", rec)
			}
			if _, ok := rec["timestamp"]; !ok {
				t.Errorf("no timestamp key: %v", rec)
			}
			got, _ := rec[RequestIDKey].(string)
			if got != tt.wantReqID {
				t.Errorf("requestId = %q, want %q", got, tt.wantReqID)
			}
		})
	}
}

func TestParseLevel(t *testing.T) {
	tests := []struct {
		in   string
		want slog.Level
	}{
		{"", slog.LevelInfo}, {"DEBUG", slog.LevelDebug}, {"trace", slog.LevelDebug}, {"INFO", slog.LevelInfo},
		{"WARN", slog.LevelWarn}, {"ERROR", slog.LevelError}, {"FATAL", slog.LevelError}, {"loud", slog.LevelInfo},
	}
	for _, tt := range tests {
		if got := ParseLevel(tt.in); got != tt.want {
			t.Errorf("ParseLevel(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// isolateAWSEnv clears everything the default config chain reads, so the test sees neither
// the machine's credentials nor its profile.
func isolateAWSEnv(t *testing.T) {
	t.Helper()
	dir := t.TempDir()
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
		"AWS_DEFAULT_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_WEB_IDENTITY_TOKEN_FILE", "AWS_ROLE_ARN",
		"AWS_CONTAINER_CREDENTIALS_FULL_URI", "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_ENDPOINT_URL",
		"AWS_ENDPOINT_URL_DYNAMODB", "AWS_XRAY_SDK_DISABLED", "AWS_LAMBDA_FUNCTION_NAME", "LAMBDA_TASK_ROOT",
		"AWS_XRAY_DAEMON_ADDRESS", "AWS_XRAY_CONTEXT_MISSING", "AWS_SAM_LOCAL", "AWS_LAMBDA_INITIALIZATION_TYPE", "AWS_LAMBDA_LOG_STREAM_NAME",
		"AWS_LAMBDA_RUNTIME_API", NamespaceEnv, PowertoolsNamespaceEnv, PowertoolsServiceEnv} {
		t.Setenv(k, "")
	}
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(dir, "config"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(dir, "credentials"))
	t.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// fakeDynamoDB answers ListTables and counts requests.
func fakeDynamoDB(t *testing.T) (*httptest.Server, *atomic.Int32, *atomic.Value) {
	t.Helper()
	var hits atomic.Int32
	var auth atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		auth.Store(r.Header.Get("Authorization"))
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		_, _ = w.Write([]byte(`{"TableNames":["turnstile-test-locks"]}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &hits, &auth
}

func TestAWSConfigLocalEndpoint(t *testing.T) {
	isolateAWSEnv(t)
	srv, hits, auth := fakeDynamoDB(t)
	t.Setenv(EndpointEnv, srv.URL)

	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Region != LocalRegion {
		t.Errorf("region = %q, want %q", cfg.Region, LocalRegion)
	}
	creds, err := cfg.Credentials.Retrieve(context.Background())
	if err != nil || creds.AccessKeyID != LocalAccessKeyID {
		t.Errorf("credentials = %+v, %v; want the static local ones", creds, err)
	}
	out, err := dynamodb.NewFromConfig(cfg).ListTables(context.Background(), &dynamodb.ListTablesInput{})
	if err != nil {
		t.Fatalf("ListTables via DYNAMODB_ENDPOINT: %v", err)
	}
	if hits.Load() != 1 || len(out.TableNames) != 1 {
		t.Errorf("fake engine saw %d requests, tables %v", hits.Load(), out.TableNames)
	}
	if a, _ := auth.Load().(string); !strings.Contains(a, "Credential="+LocalAccessKeyID+"/") {
		t.Errorf("request not signed with the local credentials: %q", a)
	}
	if ep := dynamodbstreams.NewFromConfig(cfg).Options().BaseEndpoint; aws.ToString(ep) != srv.URL {
		t.Errorf("streams endpoint = %v, want %s", aws.ToString(ep), srv.URL)
	}
	if ep := sqs.NewFromConfig(cfg).Options().BaseEndpoint; ep != nil {
		t.Errorf("SQS endpoint changed to %s; only DynamoDB clients may use DYNAMODB_ENDPOINT", *ep)
	}
}

func TestAWSConfigKeepsConfiguredCredentials(t *testing.T) {
	isolateAWSEnv(t)
	srv, _, _ := fakeDynamoDB(t)
	t.Setenv(EndpointEnv, srv.URL)
	t.Setenv("AWS_ACCESS_KEY_ID", "AKIAEXAMPLEKEY")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "example-secret")
	t.Setenv("AWS_REGION", "eu-west-1")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	creds, err := cfg.Credentials.Retrieve(context.Background())
	if err != nil || creds.AccessKeyID != "AKIAEXAMPLEKEY" {
		t.Errorf("credentials = %+v, %v; want the environment's", creds, err)
	}
	if cfg.Region != "eu-west-1" {
		t.Errorf("region = %q", cfg.Region)
	}
}

func TestAWSConfigWithoutEndpoint(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv(EndpointEnv, "")
	t.Setenv("AWS_REGION", "us-east-1")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if ep := dynamodb.NewFromConfig(cfg).Options().BaseEndpoint; ep != nil {
		t.Errorf("DynamoDB endpoint overridden to %s without DYNAMODB_ENDPOINT", *ep)
	}
}

func TestTracingEnabled(t *testing.T) {
	tests := []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"outside lambda", map[string]string{}, false},
		{"lambda with tracing", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", "LAMBDA_TASK_ROOT": "/var/task", "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000"}, true},
		{"lambda without daemon", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", "LAMBDA_TASK_ROOT": "/var/task"}, false},
		{"sdk disabled", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", "LAMBDA_TASK_ROOT": "/var/task", "AWS_XRAY_DAEMON_ADDRESS": "169.254.79.129:2000", "AWS_XRAY_SDK_DISABLED": "TRUE"}, false},
		{"local emulation", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", "AWS_XRAY_SDK_DISABLED": "true"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWSEnv(t)
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if got := TracingEnabled(); got != tt.want {
				t.Errorf("TracingEnabled() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestInstrumentAWS(t *testing.T) {
	isolateAWSEnv(t)
	var cfg aws.Config
	InstrumentAWS(&cfg)
	if len(cfg.APIOptions) != 0 {
		t.Fatalf("instrumented outside Lambda: %d API options", len(cfg.APIOptions))
	}

	// Inside "Lambda" with tracing: SDK calls get the X-Ray middleware and still work when
	// the context carries no segment (the context-missing strategy only logs).
	srv, hits, _ := fakeDynamoDB(t)
	t.Setenv(EndpointEnv, srv.URL)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "turnstile-test-fn")
	t.Setenv("LAMBDA_TASK_ROOT", t.TempDir())
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", "127.0.0.1:2000")
	t.Setenv("AWS_XRAY_CONTEXT_MISSING", "IGNORE_ERROR")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.APIOptions) == 0 {
		t.Fatal("no X-Ray middleware added inside Lambda")
	}
	if _, err := dynamodb.NewFromConfig(cfg).ListTables(context.Background(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatalf("instrumented call without a segment: %v", err)
	}
	if hits.Load() != 1 {
		t.Errorf("fake engine saw %d requests", hits.Load())
	}
}

func TestMetrics(t *testing.T) {
	var buf bytes.Buffer
	old := MetricsOutput
	MetricsOutput = &buf
	t.Cleanup(func() { MetricsOutput = old })
	t.Setenv("METRICS_NAMESPACE", "")
	t.Setenv("STAGE", "dev")

	ctx := lambdacontext.NewContext(context.Background(), &lambdacontext.LambdaContext{AwsRequestID: "req-1"})
	//lint:ignore SA1029 aws-lambda-go stores the trace header under this string key.
	ctx = context.WithValue(ctx, "x-amzn-trace-id", "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1")
	m := Metrics(ctx, "janitor")
	m.PutMetric("AbandonedLeases", 1, "Count")
	if err := m.Flush(); err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
		t.Fatalf("%v: %s", err, buf.String())
	}
	dir := doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
	if dir["Namespace"] != DefaultNamespace {
		t.Errorf("namespace = %v", dir["Namespace"])
	}
	for k, want := range map[string]any{"Function": "janitor", "Stage": "dev", "AbandonedLeases": 1.0, RequestIDKey: "req-1",
		"traceId": "Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1"} {
		if doc[k] != want {
			t.Errorf("%s = %v, want %v", k, doc[k], want)
		}
	}
}

func TestEndpointOverrideRefusedInsideLambdaUnlessLoopback(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		inLambda bool
		wantErr  bool
	}{
		{"outside lambda any host", map[string]string{EndpointEnv: "http://10.0.0.5:8000"}, false, false},
		{"outside lambda sdk override", map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "https://example.com"}, false, false},
		{"lambda no override", nil, true, false},
		{"lambda 127.0.0.1", map[string]string{EndpointEnv: "http://127.0.0.1:8000"}, true, false},
		{"lambda 127.0.0.0/8", map[string]string{EndpointEnv: "http://127.42.0.9:8000"}, true, false},
		{"lambda ::1", map[string]string{EndpointEnv: "http://[::1]:8000"}, true, false},
		{"lambda localhost", map[string]string{EndpointEnv: "http://LocalHost:8000"}, true, false},
		{"lambda private address", map[string]string{EndpointEnv: "http://10.0.0.5:8000"}, true, true},
		{"lambda public name", map[string]string{EndpointEnv: "https://dynamodb.attacker.example"}, true, true},
		{"lambda localhost look-alike", map[string]string{EndpointEnv: "http://localhost.attacker.example:8000"}, true, true},
		{"lambda loopback look-alike name", map[string]string{EndpointEnv: "http://127.0.0.1.nip.io:8000"}, true, true},
		{"lambda userinfo trick", map[string]string{EndpointEnv: "http://127.0.0.1@198.51.100.7:8000"}, true, true},
		{"lambda unspecified address", map[string]string{EndpointEnv: "http://0.0.0.0:8000"}, true, true},
		{"lambda no scheme", map[string]string{EndpointEnv: "127.0.0.1:8000"}, true, true},
		{"lambda sdk generic override", map[string]string{"AWS_ENDPOINT_URL": "https://198.51.100.7"}, true, true},
		{"lambda sdk dynamodb override", map[string]string{"AWS_ENDPOINT_URL_DYNAMODB": "https://198.51.100.7"}, true, true},
		{"lambda sdk sqs override loopback", map[string]string{"AWS_ENDPOINT_URL_SQS": "http://127.0.0.1:9324"}, true, false},
	}
	for _, tt := range tests {
		for _, marker := range []string{"AWS_LAMBDA_FUNCTION_NAME", "AWS_LAMBDA_RUNTIME_API"} {
			if !tt.inLambda && marker != "AWS_LAMBDA_FUNCTION_NAME" {
				continue
			}
			t.Run(tt.name+"/"+marker, func(t *testing.T) {
				isolateAWSEnv(t)
				for _, k := range append(EndpointOverrideEnvs, "AWS_LAMBDA_RUNTIME_API") {
					t.Setenv(k, "")
				}
				if tt.inLambda {
					t.Setenv(marker, "x")
				}
				for k, v := range tt.env {
					t.Setenv(k, v)
				}
				err := CheckEndpointOverrides()
				if (err != nil) != tt.wantErr {
					t.Fatalf("CheckEndpointOverrides() = %v, wantErr %v", err, tt.wantErr)
				}
				// AWSConfig, which every function's main calls first, refuses the same.
				if _, cerr := AWSConfig(context.Background()); (cerr != nil) != tt.wantErr {
					t.Fatalf("AWSConfig() error = %v, wantErr %v", cerr, tt.wantErr)
				}
				if err != nil && !strings.Contains(err.Error(), "refused inside Lambda") {
					t.Errorf("error does not say why: %v", err)
				}
			})
		}
	}
}

// TestStdLogWriterDemotesRuntimeErrorReport: aws-lambda-go logs the error document of a
// failed invocation with the standard log package; the handler already logged the failure,
// so that copy goes to DEBUG (each failure logged once at INFO and above). Other standard
// log lines stay at INFO.
func TestStdLogWriterDemotesRuntimeErrorReport(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(NewHandler(&buf, slog.LevelInfo))
	std := log.New(StdLogWriter(l), "", 0)
	std.Printf("%s", `{"errorMessage":"inventoryupdater: event e1: detail.delta: is required","errorType":"InvalidEventError"}`)
	if buf.Len() != 0 {
		t.Errorf("runtime error report logged at INFO: %s", buf.String())
	}
	std.Printf("something else from a library")
	std.Printf("%s", `{"errorMessage":"x","errorType":"y","extra":1}`)
	if got := strings.Count(buf.String(), `"level":"INFO"`); got != 2 {
		t.Errorf("want 2 INFO lines, got:\n%s", buf.String())
	}
	buf.Reset()
	l = slog.New(NewHandler(&buf, slog.LevelDebug))
	log.New(StdLogWriter(l), "", 0).Printf("%s", `{"errorMessage":"m","errorType":"InvalidEventError","stackTrace":[]}`)
	if !strings.Contains(buf.String(), `"level":"DEBUG","message":"runtime error report","payload":{"errorMessage":"m"`) {
		t.Errorf("at DEBUG: %s", buf.String())
	}
}

// TestDockerEndpointOnlyUnderSAMLocal: the endpoint of the documented `sam local invoke`
// setup (docs/local-invoke.md: DynamoDB Local as container dynamodb-local on the network
// given to --docker-network) is accepted inside the Lambda emulation of SAM CLI, exactly as
// written, for DYNAMODB_ENDPOINT only; in Lambda proper (a log stream name as Lambda gives
// them, a reserved variable) or without AWS_SAM_LOCAL it is refused, and so is every other
// name. (cmd/invoke's TestDockerEnvVarsFile runs the check on SAM CLI's own environment.)
func TestDockerEndpointOnlyUnderSAMLocal(t *testing.T) {
	// What SAM CLI 1.170 sets (testdata of cmd/invoke has all of it).
	samLocal := map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "OrderProcessorFunction", "AWS_SAM_LOCAL": "true",
		"AWS_LAMBDA_LOG_STREAM_NAME": "$LATEST", "AWS_LAMBDA_INITIALIZATION_TYPE": "on-demand"}
	with := func(base map[string]string, kv ...string) map[string]string {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	tests := []struct {
		name    string
		env     map[string]string
		wantErr string // "" = accepted
	}{
		{"sam local, documented endpoint", with(samLocal, EndpointEnv, DockerEndpoint), ""},
		{"sam local, runtime api marker only", map[string]string{"AWS_LAMBDA_RUNTIME_API": "127.0.0.1:9001", "AWS_SAM_LOCAL": "true", EndpointEnv: DockerEndpoint}, ""},
		{"sam local, loopback still accepted", with(samLocal, EndpointEnv, "http://127.0.0.1:8000"), ""},
		{"sam local, no log stream name", with(samLocal, EndpointEnv, DockerEndpoint, "AWS_LAMBDA_LOG_STREAM_NAME", ""), ""},
		{"deployed function (a log stream name Lambda gives)", with(samLocal, EndpointEnv, DockerEndpoint, "AWS_LAMBDA_LOG_STREAM_NAME", "2026/11/28/[$LATEST]0123456789abcdef0123456789abcdef"), "only under sam local invoke"},
		{"deployed version 7", with(samLocal, EndpointEnv, DockerEndpoint, "AWS_LAMBDA_LOG_STREAM_NAME", "2026/01/02/[7]fedcba9876543210fedcba9876543210"), "only under sam local invoke"},
		{"lambda without AWS_SAM_LOCAL", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", EndpointEnv: DockerEndpoint}, "only under sam local invoke"},
		{"AWS_SAM_LOCAL not true", map[string]string{"AWS_LAMBDA_FUNCTION_NAME": "f", "AWS_SAM_LOCAL": "1", EndpointEnv: DockerEndpoint}, "only under sam local invoke"},
		{"other port", with(samLocal, EndpointEnv, "http://dynamodb-local:8001"), "refused inside Lambda"},
		{"https", with(samLocal, EndpointEnv, "https://dynamodb-local:8000"), "refused inside Lambda"},
		{"trailing path", with(samLocal, EndpointEnv, DockerEndpoint+"/"), "refused inside Lambda"},
		{"upper case name", with(samLocal, EndpointEnv, "http://DynamoDB-Local:8000"), "refused inside Lambda"},
		{"look-alike name", with(samLocal, EndpointEnv, "http://dynamodb-local.attacker.example:8000"), "refused inside Lambda"},
		{"userinfo trick", with(samLocal, EndpointEnv, "http://dynamodb-local:8000@198.51.100.7:8000"), "refused inside Lambda"},
		{"host.docker.internal", with(samLocal, EndpointEnv, "http://host.docker.internal:8000"), "refused inside Lambda"},
		{"private address", with(samLocal, EndpointEnv, "http://172.18.0.2:8000"), "refused inside Lambda"},
		{"sdk dynamodb override", with(samLocal, "AWS_ENDPOINT_URL_DYNAMODB", DockerEndpoint), "refused inside Lambda"},
		{"sdk generic override", with(samLocal, "AWS_ENDPOINT_URL", DockerEndpoint), "refused inside Lambda"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWSEnv(t)
			for _, k := range EndpointOverrideEnvs {
				t.Setenv(k, "")
			}
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			err := CheckEndpointOverrides()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				cfg, err := AWSConfig(context.Background())
				if err != nil {
					t.Fatalf("AWSConfig: %v", err)
				}
				if ep := aws.ToString(dynamodb.NewFromConfig(cfg).Options().BaseEndpoint); ep != tt.env[EndpointEnv] {
					t.Errorf("DynamoDB endpoint = %q, want %q", ep, tt.env[EndpointEnv])
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("CheckEndpointOverrides() = %v, want an error containing %q", err, tt.wantErr)
			}
			if _, cerr := AWSConfig(context.Background()); cerr == nil {
				t.Fatal("AWSConfig accepted what CheckEndpointOverrides refuses")
			}
		})
	}
}

// TestDeclaredEmptyEndpointInsideLambda: template.yaml declares DYNAMODB_ENDPOINT with an
// empty value (so that sam local invoke --env-vars can set it). A deployed function gets it
// empty, which must mean what unset meant: no override, no refusal, the default credential
// chain (no static local credentials).
func TestDeclaredEmptyEndpointInsideLambda(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "turnstile-prod-order-processor")
	t.Setenv("AWS_LAMBDA_INITIALIZATION_TYPE", "on-demand")
	t.Setenv("AWS_REGION", "eu-west-1")
	t.Setenv(EndpointEnv, "")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatalf("AWSConfig with DYNAMODB_ENDPOINT empty: %v", err)
	}
	if ep := dynamodb.NewFromConfig(cfg).Options().BaseEndpoint; ep != nil {
		t.Errorf("DynamoDB endpoint overridden to %q by an empty DYNAMODB_ENDPOINT", *ep)
	}
	if cfg.Region != "eu-west-1" {
		t.Errorf("region = %q, want the environment's", cfg.Region)
	}
	if creds, err := cfg.Credentials.Retrieve(context.Background()); err == nil && creds.AccessKeyID == LocalAccessKeyID {
		t.Errorf("static local credentials used with an empty DYNAMODB_ENDPOINT")
	}
}

// TestMetricsPowertoolsNames: POWERTOOLS_METRICS_NAMESPACE names the namespace when
// METRICS_NAMESPACE is unset (the project's own name wins when both are); with
// POWERTOOLS_SERVICE_NAME every metric is published under {service} as well as under the
// {Function, Stage} set the alarms watch, and without it nothing changes.
func TestMetricsPowertoolsNames(t *testing.T) {
	tests := []struct {
		name     string
		env      map[string]string
		wantNS   string
		wantDims [][]any
	}{
		{"defaults", nil, DefaultNamespace, [][]any{{"Function", "Stage"}}},
		{"powertools namespace", map[string]string{PowertoolsNamespaceEnv: "checkout"}, "checkout", [][]any{{"Function", "Stage"}}},
		{"own namespace wins", map[string]string{PowertoolsNamespaceEnv: "checkout", NamespaceEnv: "turnstile-x"}, "turnstile-x", [][]any{{"Function", "Stage"}}},
		{"service", map[string]string{PowertoolsServiceEnv: "orders"}, DefaultNamespace, [][]any{{"Function", "Stage"}, {"service"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			isolateAWSEnv(t)
			t.Setenv("STAGE", "dev")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			var buf bytes.Buffer
			old := MetricsOutput
			MetricsOutput = &buf
			t.Cleanup(func() { MetricsOutput = old })
			m := Metrics(context.Background(), "orderprocessor")
			m.PutMetric("LockWait", 3, "Milliseconds")
			if err := m.Flush(); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatalf("%v: %s", err, buf.String())
			}
			dir := doc["_aws"].(map[string]any)["CloudWatchMetrics"].([]any)[0].(map[string]any)
			if dir["Namespace"] != tt.wantNS {
				t.Errorf("namespace = %v, want %s", dir["Namespace"], tt.wantNS)
			}
			gotDims, _ := json.Marshal(dir["Dimensions"])
			wantDims, _ := json.Marshal(tt.wantDims)
			if string(gotDims) != string(wantDims) {
				t.Errorf("dimension sets = %s, want %s", gotDims, wantDims)
			}
			if svc := tt.env[PowertoolsServiceEnv]; svc != "" && doc[ServiceDimension] != svc {
				t.Errorf("service = %v, want %s", doc[ServiceDimension], svc)
			}
			if _, ok := doc[ServiceDimension]; ok && tt.env[PowertoolsServiceEnv] == "" {
				t.Errorf("service key without POWERTOOLS_SERVICE_NAME: %s", buf.String())
			}
			if doc["Function"] != "orderprocessor" || doc["Stage"] != "dev" {
				t.Errorf("Function/Stage = %v/%v", doc["Function"], doc["Stage"])
			}
		})
	}
}

// TestLoggerServiceKey: with POWERTOOLS_SERVICE_NAME every log record has "service", as
// Powertools' logger writes it; without it there is no such key.
func TestLoggerServiceKey(t *testing.T) {
	for _, svc := range []string{"orders", ""} {
		isolateAWSEnv(t)
		t.Setenv("AWS_LAMBDA_LOG_FORMAT", "")
		t.Setenv(PowertoolsServiceEnv, svc)
		var buf bytes.Buffer
		newLogger(&buf).Info("order reserved")
		var rec map[string]any
		if err := json.Unmarshal(buf.Bytes(), &rec); err != nil {
			t.Fatalf("%v: %s", err, buf.String())
		}
		got, ok := rec[ServiceDimension]
		if (svc == "" && ok) || (svc != "" && got != svc) {
			t.Errorf("POWERTOOLS_SERVICE_NAME=%q: record %v", svc, rec)
		}
	}
}
