package obs

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/aws/smithy-go/middleware"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/turnstile-locks/turnstile/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// headerRecorder is an SDK HTTP client that records the X-Amzn-Trace-Id header of every
// request it sends.
type headerRecorder struct {
	mu      sync.Mutex
	headers []string
}

func (r *headerRecorder) Do(req *http.Request) (*http.Response, error) {
	r.mu.Lock()
	r.headers = append(r.headers, req.Header.Get(XRayTraceHeader))
	r.mu.Unlock()
	return http.DefaultClient.Do(req)
}

func (r *headerRecorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.headers)
}

// inLambda sets what Lambda sets for a function, with tracing mode mode ("" for unset).
func inLambda(t *testing.T, mode string) {
	t.Helper()
	isolateAWSEnv(t)
	t.Setenv(EndpointEnv, testenv.Endpoint())
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "turnstile-test-fn")
	t.Setenv("LAMBDA_TASK_ROOT", t.TempDir())
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", "127.0.0.1:2000") // Tracing: Active sets it in both modes
	t.Setenv("AWS_XRAY_CONTEXT_MISSING", "IGNORE_ERROR")
	t.Setenv("OTEL_SDK_DISABLED", "")
	t.Setenv("_X_AMZN_TRACE_ID", "")
	t.Setenv(TracingEnv, mode)
}

// memoryExporter makes the OpenTelemetry back end export to memory for this test.
func memoryExporter(t *testing.T) *tracetest.InMemoryExporter {
	t.Helper()
	mem := tracetest.NewInMemoryExporter()
	old := newSpanExporter
	newSpanExporter = func(context.Context) (sdktrace.SpanExporter, error) { return mem, nil }
	otelState.mu.Lock()
	otelState.tp = nil
	otelState.mu.Unlock()
	t.Cleanup(func() {
		otelState.mu.Lock()
		if otelState.tp != nil {
			_ = otelState.tp.Shutdown(context.Background())
		}
		otelState.tp = nil
		otelState.mu.Unlock()
		newSpanExporter = old
	})
	return mem
}

func spanNamed(spans tracetest.SpanStubs, name string) (tracetest.SpanStub, bool) {
	for _, s := range spans {
		if s.Name == name {
			return s, true
		}
	}
	return tracetest.SpanStub{}, false
}

func attr(s tracetest.SpanStub, key string) attribute.Value {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value
		}
	}
	return attribute.Value{}
}

var xrayHeaderRE = regexp.MustCompile(`^Root=1-([0-9a-f]{8})-([0-9a-f]{24});Parent=([0-9a-f]{16});Sampled=1$`)

// checkXRayTraceID fails unless id is 32 hex digits whose first 8 are the epoch seconds
// of a moment within [from, to].
func checkXRayTraceID(t *testing.T, id trace.TraceID, from, to time.Time) {
	t.Helper()
	s := id.String()
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(s) {
		t.Fatalf("trace id %q is not 32 hex digits", s)
	}
	secs := int64(binary.BigEndian.Uint32(id[:4]))
	if secs < from.Unix() || secs > to.Unix() {
		t.Fatalf("trace id %s starts with %s = %s, want a time in [%s, %s] (X-Ray's format)",
			s, s[:8], time.Unix(secs, 0).UTC(), from.UTC(), to.UTC())
	}
}

// TURNSTILE_TRACING=otel: SDK calls against the engine become client spans with X-Ray
// trace ids, children of the invocation's span, which is the child of the trace Lambda
// passed in; the X-Amzn-Trace-Id header of each request names the call's span.
func TestOTelTracesSDKCallsWithXRayTraceIDs(t *testing.T) {
	inLambda(t, TracingOTel)
	mem := memoryExporter(t)
	table := testenv.Table(t, "LockTable")
	rec := &headerRecorder{}
	ctx := context.Background()
	start := time.Now().Add(-time.Second)

	cfg, err := AWSConfig(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cfg.HTTPClient = rec
	db := dynamodb.NewFromConfig(cfg)
	key := map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}, "sk": &types.AttributeValueMemberS{Value: "ns"}}

	// Outside an invocation (init code): a root span, with an id of X-Ray's format.
	if _, err := db.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table), Key: key}); err != nil {
		t.Fatal(err)
	}
	tp, err := otelTracerProvider()
	if err != nil {
		t.Fatal(err)
	}
	if err := tp.ForceFlush(ctx); err != nil {
		t.Fatal(err)
	}
	root, ok := spanNamed(mem.GetSpans(), "DynamoDB.GetItem")
	if !ok {
		t.Fatalf("no DynamoDB.GetItem span; spans: %v", mem.GetSpans())
	}
	if root.Parent.IsValid() {
		t.Errorf("init-time call has parent %v", root.Parent)
	}
	checkXRayTraceID(t, root.SpanContext.TraceID(), start, time.Now().Add(time.Second))
	if root.SpanKind != trace.SpanKindClient || attr(root, "rpc.system").AsString() != "aws-api" ||
		attr(root, "rpc.service").AsString() != "DynamoDB" || attr(root, "rpc.method").AsString() != "GetItem" ||
		!slices.Equal(attr(root, "aws.dynamodb.table_names").AsStringSlice(), []string{table}) ||
		attr(root, "aws.request_id").AsString() == "" || attr(root, "http.response.status_code").AsInt64() != 200 {
		t.Errorf("call span kind %v, attributes %v", root.SpanKind, root.Attributes)
	}
	hdrs := rec.all()
	m := xrayHeaderRE.FindStringSubmatch(hdrs[len(hdrs)-1])
	if m == nil || m[1]+m[2] != root.SpanContext.TraceID().String() || m[3] != root.SpanContext.SpanID().String() {
		t.Fatalf("request header X-Amzn-Trace-Id = %q, want Root and Parent of span %v", hdrs[len(hdrs)-1], root.SpanContext)
	}
	mem.Reset()

	// In an invocation: Lambda's trace header in the context is the parent.
	lambdaTrace := "Root=1-" + hex.EncodeToString(binary.BigEndian.AppendUint32(nil, uint32(time.Now().Unix()))) +
		"-0123456789abcdef01234567;Parent=53995c3f42cd8ad8;Sampled=1;Lineage=a87bd80c:0"
	invoked := lambda.NewHandler(func(ctx context.Context) (string, error) {
		_, err := db.PutItem(ctx, &dynamodb.PutItemInput{TableName: aws.String(table), Item: key})
		return "done", err
	})
	h := TraceHandler(invoked)
	if h == invoked {
		t.Fatal("TraceHandler did not wrap the handler in otel mode")
	}
	ictx := lambdacontext.NewContext(ctx, &lambdacontext.LambdaContext{AwsRequestID: "req-1",
		InvokedFunctionArn: "arn:aws:lambda:us-east-1:123456789012:function:turnstile-test-fn"})
	//lint:ignore SA1029 aws-lambda-go stores the trace header under this string key.
	ictx = context.WithValue(ictx, "x-amzn-trace-id", lambdaTrace)
	out, err := h.Invoke(ictx, []byte(`{}`))
	if err != nil || string(out) != `"done"` {
		t.Fatalf("Invoke = %s, %v", out, err)
	}
	// Invoke flushed: the spans are there without a ForceFlush.
	spans := mem.GetSpans()
	inv, ok1 := spanNamed(spans, "turnstile-test-fn")
	put, ok2 := spanNamed(spans, "DynamoDB.PutItem")
	if !ok1 || !ok2 {
		t.Fatalf("want the invocation and PutItem spans, got %v", spans)
	}
	if got := inv.SpanContext.TraceID().String(); got != lambdaTrace[7:15]+"0123456789abcdef01234567" {
		t.Errorf("invocation trace id %s, want Lambda's %s", got, lambdaTrace)
	}
	if inv.Parent.SpanID().String() != "53995c3f42cd8ad8" || !inv.Parent.IsRemote() || inv.SpanKind != trace.SpanKindServer {
		t.Errorf("invocation span parent %v kind %v, want Lambda's segment 53995c3f42cd8ad8", inv.Parent, inv.SpanKind)
	}
	if attr(inv, "faas.invocation_id").AsString() != "req-1" || !attr(inv, "faas.coldstart").AsBool() {
		t.Errorf("invocation span attributes %v", inv.Attributes)
	}
	if put.Parent.SpanID() != inv.SpanContext.SpanID() || put.SpanContext.TraceID() != inv.SpanContext.TraceID() {
		t.Errorf("PutItem span parent %v, want the invocation span %v", put.Parent, inv.SpanContext)
	}
	hdrs = rec.all()
	want := "Root=1-" + lambdaTrace[7:15] + "-0123456789abcdef01234567;Parent=" + put.SpanContext.SpanID().String() + ";Sampled=1"
	if got := hdrs[len(hdrs)-1]; got != want {
		t.Errorf("PutItem request X-Amzn-Trace-Id = %q, want %q", got, want)
	}
	if r := put.Resource; r == nil || !slices.Contains(r.Attributes(), attribute.String("service.name", "turnstile-test-fn")) ||
		!slices.Contains(r.Attributes(), attribute.String("cloud.platform", "aws_lambda")) {
		t.Errorf("resource %v", put.Resource)
	}
}

// TURNSTILE_TRACING unset (the template's default, xray): the X-Ray SDK traces the calls,
// the handler is not wrapped and no OpenTelemetry provider is made.
func TestDefaultTracingIsXRay(t *testing.T) {
	for _, mode := range []string{"", "xray", "XRay", "zipkin"} {
		t.Run("mode="+mode, func(t *testing.T) {
			inLambda(t, mode)
			memoryExporter(t)
			if got := TracingMode(); got != TracingXRay {
				t.Fatalf("TracingMode() = %q, want xray", got)
			}
			table := testenv.Table(t, "LockTable")
			rec := &headerRecorder{}
			cfg, err := AWSConfig(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			cfg.HTTPClient = rec
			var ids []string
			db := dynamodb.NewFromConfig(cfg, func(o *dynamodb.Options) {
				o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
					ids = append(s.Initialize.List(), s.Finalize.List()...)
					return nil
				})
			})
			ctx, seg := xray.BeginSegment(context.Background(), "turnstile-test-fn")
			_, err = db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
			seg.Close(nil)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Contains(ids, "XRayInitializeMiddlewareAfter") || slices.Contains(ids, otelCallSpan{}.ID()) ||
				slices.Contains(ids, otelPropagate{}.ID()) {
				t.Errorf("middleware %v: want X-Ray's, not OpenTelemetry's", ids)
			}
			hdrs := rec.all()
			if len(hdrs) == 0 || !strings.HasPrefix(hdrs[len(hdrs)-1], "Root="+seg.TraceID+";") {
				t.Errorf("request X-Amzn-Trace-Id = %q, want the X-Ray segment's trace %s", hdrs, seg.TraceID)
			}
			h := lambda.NewHandler(func() error { return nil })
			if TraceHandler(h) != h {
				t.Error("TraceHandler wrapped the handler in X-Ray mode")
			}
			otelState.mu.Lock()
			made := otelState.tp != nil
			otelState.mu.Unlock()
			if made {
				t.Error("an OpenTelemetry tracer provider was made in X-Ray mode")
			}
		})
	}
}

func TestTracingEnabledOTel(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		want bool
	}{
		{"lambda", map[string]string{}, true},
		{"no X-Ray daemon needed", map[string]string{"AWS_XRAY_DAEMON_ADDRESS": ""}, true},
		{"X-Ray SDK switch does not apply", map[string]string{"AWS_XRAY_SDK_DISABLED": "true"}, true},
		{"OTEL_SDK_DISABLED", map[string]string{"OTEL_SDK_DISABLED": "TRUE"}, false},
		{"local emulation", map[string]string{"LAMBDA_TASK_ROOT": ""}, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inLambda(t, "OTel")
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			if TracingMode() != TracingOTel {
				t.Fatalf("TracingMode() = %q", TracingMode())
			}
			if got := TracingEnabled(); got != tt.want {
				t.Errorf("TracingEnabled() = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestXRayIDGenerator(t *testing.T) {
	at := time.Date(2027, 2, 25, 12, 0, 0, 0, time.UTC)
	g := xrayIDGenerator{now: func() time.Time { return at }}
	seen := map[trace.TraceID]bool{}
	for range 100 {
		tid, sid := g.NewIDs(context.Background())
		checkXRayTraceID(t, tid, at, at)
		if !sid.IsValid() || seen[tid] {
			t.Fatalf("ids %s %s (repeated or invalid)", tid, sid)
		}
		seen[tid] = true
		if s := g.NewSpanID(context.Background(), tid); !s.IsValid() {
			t.Fatal("invalid span id")
		}
	}
}

func TestXRayPropagator(t *testing.T) {
	tid, _ := trace.TraceIDFromHex("5759e988bd862e3fe1be46a994272793")
	sid, _ := trace.SpanIDFromHex("53995c3f42cd8ad8")
	for _, tt := range []struct {
		header  string
		ok      bool
		sampled bool
	}{
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1", true, true},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0", true, false},
		{"Parent=53995c3f42cd8ad8; Sampled=1; Root=1-5759E988-BD862E3FE1BE46A994272793; Lineage=a87bd80c:0", true, true},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", true, false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=?", true, false},
		{"", false, false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793", false, false},                         // no parent
		{"Parent=53995c3f42cd8ad8;Sampled=1", false, false},                                // no root
		{"Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", false, false}, // version
		{"Root=1-5759e98-bd862e3fe1be46a9942727930;Parent=53995c3f42cd8ad8", false, false},
		{"Root=1-5759e988-bd862e3fe1be46a99427279z;Parent=53995c3f42cd8ad8", false, false},
		{"Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8", false, false}, // zero id
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", false, false},
		{"Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8a", false, false},
	} {
		ctx := xrayPropagator{}.Extract(context.Background(), propagation.MapCarrier{XRayTraceHeader: tt.header})
		sc := trace.SpanContextFromContext(ctx)
		if sc.IsValid() != tt.ok {
			t.Errorf("Extract(%q) valid = %v, want %v", tt.header, sc.IsValid(), tt.ok)
			continue
		}
		if !tt.ok {
			continue
		}
		if sc.TraceID() != tid || sc.SpanID() != sid || sc.IsSampled() != tt.sampled || !sc.IsRemote() {
			t.Errorf("Extract(%q) = %v sampled %v", tt.header, sc, sc.IsSampled())
		}
		// Inject writes the canonical form back.
		c := propagation.HeaderCarrier(http.Header{})
		xrayPropagator{}.Inject(ctx, c)
		want := "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=0"
		if tt.sampled {
			want = want[:len(want)-1] + "1"
		}
		if got := http.Header(c).Get("X-Amzn-Trace-Id"); got != want {
			t.Errorf("Inject after Extract(%q) = %q, want %q", tt.header, got, want)
		}
	}
	c := propagation.HeaderCarrier(http.Header{})
	xrayPropagator{}.Inject(context.Background(), c)
	if len(http.Header(c)) != 0 {
		t.Errorf("Inject without a span wrote %v", c)
	}
}

// Inside Lambda the spans go to a loopback collector only, as the AWS endpoints do: an
// OTLP endpoint elsewhere turns tracing off (logged), and the function keeps working.
func TestOTelRefusesRemoteCollectorInsideLambda(t *testing.T) {
	for _, tt := range []struct {
		env, value string
		refused    bool
	}{
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318", false},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:4318/v1/traces", false},
		{"OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector.example.com:4318", true},
		{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://198.51.100.7:4318/v1/traces", true},
	} {
		t.Run(tt.env+"="+tt.value, func(t *testing.T) {
			inLambda(t, TracingOTel)
			memoryExporter(t)
			t.Setenv(tt.env, tt.value)
			_, err := otelTracerProvider()
			if (err != nil) != tt.refused {
				t.Fatalf("otelTracerProvider() error = %v, want refused %v", err, tt.refused)
			}
			cfg, err := AWSConfig(context.Background())
			if err != nil {
				t.Fatalf("AWSConfig: %v (a refused collector must not fail the function)", err)
			}
			h := lambda.NewHandler(func() error { return nil })
			if wrapped := TraceHandler(h) != h; wrapped == tt.refused || (len(cfg.APIOptions) > 0) == tt.refused {
				t.Errorf("handler wrapped %v, SDK instrumented %v; want %v", wrapped, len(cfg.APIOptions) > 0, !tt.refused)
			}
		})
	}
}

// The real exporter: spans reach an OTLP/HTTP receiver on loopback (the collector layer's
// place), at OTEL_EXPORTER_OTLP_ENDPOINT or by default at DefaultOTLPEndpoint, in plain
// HTTP on /v1/traces, before the invocation returns.
func TestOTelExportsOverOTLPHTTP(t *testing.T) {
	for _, viaEnv := range []bool{true, false} {
		t.Run(fmt.Sprintf("OTEL_EXPORTER_OTLP_ENDPOINT set %v", viaEnv), func(t *testing.T) {
			testOTLPExport(t, viaEnv)
		})
	}
}

func testOTLPExport(t *testing.T, viaEnv bool) {
	inLambda(t, TracingOTel)
	var mu sync.Mutex
	var got []string
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, r.Method+" "+r.URL.Path+" "+r.Header.Get("Content-Type")+" "+string(b))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "")
	t.Setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "")
	if viaEnv {
		t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.URL)
	} else {
		old := defaultOTLPEndpoint
		defaultOTLPEndpoint = collector.URL // in place of http://localhost:4318
		t.Cleanup(func() { defaultOTLPEndpoint = old })
	}
	otelState.mu.Lock()
	otelState.tp = nil // the real newSpanExporter, made anew with this endpoint
	otelState.mu.Unlock()
	t.Cleanup(func() {
		otelState.mu.Lock()
		if otelState.tp != nil {
			_ = otelState.tp.Shutdown(context.Background())
		}
		otelState.tp = nil
		otelState.mu.Unlock()
	})
	table := testenv.Table(t, "LockTable")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	db := dynamodb.NewFromConfig(cfg)
	h := TraceHandler(lambda.NewHandler(func(ctx context.Context) error {
		_, err := db.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		return err
	}))
	if _, err := h.Invoke(context.Background(), []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 {
		t.Fatal("no export reached the collector before Invoke returned")
	}
	all := strings.Join(got, "\n")
	if !strings.HasPrefix(got[0], "POST /v1/traces application/x-protobuf ") ||
		!strings.Contains(all, "DynamoDB.DescribeTable") || !strings.Contains(all, "turnstile-test-fn") {
		t.Errorf("collector received %q", all)
	}
}

// FuzzXRayHeader: any header either parses to a valid remote span context whose canonical
// form parses back to the same one, or leaves the context alone; nothing panics.
func FuzzXRayHeader(f *testing.F) {
	f.Add("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1")
	f.Add("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=?;Lineage=a87bd80c:0")
	f.Add("Self=1-5759e988-bd862e3fe1be46a994272793;Root=;Parent==")
	f.Fuzz(func(t *testing.T, h string) {
		sc, ok := parseXRayHeader(h)
		if !ok {
			return
		}
		if !sc.IsValid() || !sc.IsRemote() {
			t.Fatalf("parse(%q) = %v, not a valid remote context", h, sc)
		}
		again, ok := parseXRayHeader(formatXRayHeader(sc))
		if !ok || again.TraceID() != sc.TraceID() || again.SpanID() != sc.SpanID() || again.IsSampled() != sc.IsSampled() {
			t.Fatalf("round trip of %q: %v, then %q gives %v", h, sc, formatXRayHeader(sc), again)
		}
	})
}
