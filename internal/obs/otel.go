package obs

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-lambda-go/lambdacontext"
	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.40.0"
	"go.opentelemetry.io/otel/trace"
)

// The OpenTelemetry back end of the tracing seam (TURNSTILE_TRACING=otel, see trace.go):
// spans with X-Ray trace ids (xrayIDGenerator), X-Ray trace-header propagation
// (xrayPropagator), exported over OTLP/HTTP to the collector that the ADOT Lambda layer
// runs as an extension beside the function; its default configuration forwards them to
// X-Ray, into the same trace as the segment Lambda's active tracing writes.

// otelScope is the instrumentation scope of the spans this package makes.
const otelScope = "github.com/turnstile-locks/turnstile/internal/obs"

// DefaultOTLPEndpoint is where spans go unless OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) says otherwise: the OTLP/HTTP receiver of the ADOT
// collector layer. Plain HTTP: it listens on the sandbox's loopback only.
const DefaultOTLPEndpoint = "http://localhost:4318"

// flushTimeout bounds the export at the end of each invocation. Lambda freezes the
// process once the handler returns, so spans still buffered then would be sent late (at
// the next invocation) or never; the collector is local and answers in milliseconds, and
// a collector that is missing (no layer) must not hold every invocation for long.
const flushTimeout = 2 * time.Second

// defaultOTLPEndpoint is DefaultOTLPEndpoint; tests point it at a receiver of theirs.
var defaultOTLPEndpoint = DefaultOTLPEndpoint

// newSpanExporter makes the exporter of the tracer provider; tests replace it.
var newSpanExporter = func(ctx context.Context) (sdktrace.SpanExporter, error) {
	var opts []otlptracehttp.Option
	if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
		// The full URL: WithEndpointURL takes the path as given (none would mean "/"),
		// unlike OTEL_EXPORTER_OTLP_ENDPOINT, to which the exporter appends /v1/traces.
		opts = append(opts, otlptracehttp.WithEndpointURL(defaultOTLPEndpoint+"/v1/traces"))
	}
	// No retries: the export runs inside the invocation (flushTimeout), and a local
	// collector that refused a batch will refuse it again a moment later.
	opts = append(opts, otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: false}))
	return otlptracehttp.New(ctx, opts...)
}

var otelState struct {
	mu sync.Mutex
	tp *sdktrace.TracerProvider
}

// otelTracerProvider returns the process's tracer provider, made on first use: the
// exporter of newSpanExporter behind a batch span processor, X-Ray trace ids, the Lambda
// function as the resource (OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME override it),
// the sampler the standard OTEL_TRACES_SAMPLER variables name (default: follow the parent,
// that is Lambda's sampling decision). It is also made the global provider, with the X-Ray
// propagator, for any library that uses otel's globals.
func otelTracerProvider() (*sdktrace.TracerProvider, error) {
	otelState.mu.Lock()
	defer otelState.mu.Unlock()
	if otelState.tp != nil {
		return otelState.tp, nil
	}
	if err := checkOTLPEndpoint(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	exp, err := newSpanExporter(ctx)
	if err != nil {
		return nil, err
	}
	res, err := resource.New(ctx,
		resource.WithAttributes(lambdaResource()...),
		resource.WithFromEnv(), // after ours: the operator's variables win
		resource.WithTelemetrySDK())
	if err != nil {
		Logger().Warn("OpenTelemetry resource incomplete", "error", err)
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithIDGenerator(xrayIDGenerator{}),
		sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(xrayPropagator{})
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		Logger().Warn("OpenTelemetry", "error", err, "source", "opentelemetry-go")
	}))
	otelState.tp = tp
	return tp, nil
}

// OTLPEndpointEnvs are the variables that redirect the spans (the OTLP exporter's
// standard ones).
var OTLPEndpointEnvs = []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"}

// checkOTLPEndpoint refuses, inside Lambda (InLambda), an OTLP endpoint that is not a
// loopback address, as CheckEndpointOverrides does for the AWS endpoints: the collector
// layer listens on the sandbox's loopback, and spans carry table names, lock keys and
// error messages that whoever can edit the function's environment must not be able to
// send elsewhere. A refused endpoint costs the function its traces, not its work.
func checkOTLPEndpoint() error {
	if !InLambda() {
		return nil
	}
	for _, k := range OTLPEndpointEnvs {
		if v := os.Getenv(k); v != "" {
			if err := loopbackURL(v); err != nil {
				return fmt.Errorf("obs: %s=%q refused inside Lambda: %w; spans go only to a collector on a loopback address", k, v, err)
			}
		}
	}
	return nil
}

// lambdaResource describes the function from the variables Lambda sets.
func lambdaResource() []attribute.KeyValue {
	attrs := []attribute.KeyValue{semconv.CloudProviderAWS, semconv.CloudPlatformAWSLambda}
	if v := os.Getenv("AWS_LAMBDA_FUNCTION_NAME"); v != "" {
		attrs = append(attrs, semconv.ServiceName(v), semconv.FaaSName(v))
	}
	if v := os.Getenv("AWS_LAMBDA_FUNCTION_VERSION"); v != "" {
		attrs = append(attrs, semconv.FaaSVersion(v))
	}
	if v := os.Getenv("AWS_REGION"); v != "" {
		attrs = append(attrs, semconv.CloudRegion(v))
	}
	return attrs
}

// instrumentOTel adds to cfg the middleware that traces every SDK call made with it: a
// client span per operation ("DynamoDB.GetItem"), around its retries, with the attributes
// the ADOT collector's X-Ray exporter turns into an AWS subsegment (rpc.system aws-api,
// rpc.service, rpc.method, aws.request_id, the table name); and, on every attempt, the
// span's context in the X-Amzn-Trace-Id header (SigV4 does not sign that header, so it
// can be set after signing).
func instrumentOTel(cfg *aws.Config, tp trace.TracerProvider) {
	tracer := tp.Tracer(otelScope)
	cfg.APIOptions = append(cfg.APIOptions, func(stack *middleware.Stack) error {
		if err := stack.Initialize.Add(otelCallSpan{tracer}, middleware.After); err != nil {
			return err
		}
		return stack.Finalize.Add(otelPropagate{}, middleware.After)
	})
}

// otelCallSpan is the Initialize middleware that wraps an SDK operation in a span.
type otelCallSpan struct{ tracer trace.Tracer }

// ID implements middleware.InitializeMiddleware.
func (otelCallSpan) ID() string { return "TurnstileOTelCallSpan" }

// HandleInitialize implements middleware.InitializeMiddleware.
func (m otelCallSpan) HandleInitialize(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (
	out middleware.InitializeOutput, md middleware.Metadata, err error,
) {
	service, op := awsmiddleware.GetServiceID(ctx), awsmiddleware.GetOperationName(ctx)
	attrs := []attribute.KeyValue{
		attribute.String("rpc.system", "aws-api"),
		attribute.String("rpc.service", service),
		attribute.String("rpc.method", op),
	}
	if r := awsmiddleware.GetRegion(ctx); r != "" {
		attrs = append(attrs, semconv.CloudRegion(r))
	}
	if t := tableName(in.Parameters); t != "" {
		attrs = append(attrs, semconv.AWSDynamoDBTableNames(t))
	}
	ctx, span := m.tracer.Start(ctx, service+"."+op, trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(attrs...))
	defer span.End()

	out, md, err = next.HandleInitialize(ctx, in)
	if id, ok := awsmiddleware.GetRequestIDMetadata(md); ok {
		span.SetAttributes(semconv.AWSRequestID(id))
	}
	if resp, ok := awsmiddleware.GetRawResponse(md).(*smithyhttp.Response); ok && resp != nil {
		span.SetAttributes(semconv.HTTPResponseStatusCode(resp.StatusCode))
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	return out, md, err
}

// tableName returns the TableName field of an SDK operation's input, "" if it has none
// (DynamoDB's single-table operations have one; a transaction names its tables per item).
func tableName(params any) string {
	v := reflect.ValueOf(params)
	if v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return ""
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return ""
	}
	f := v.FieldByName("TableName")
	if !f.IsValid() || f.Type() != reflect.TypeFor[*string]() || f.IsNil() {
		return ""
	}
	return *f.Interface().(*string)
}

// otelPropagate is the Finalize middleware that puts the call span's context in the
// request's X-Amzn-Trace-Id header (replacing the one the SDK's recursion-detection
// middleware copied from _X_AMZN_TRACE_ID, which names the invocation, not the call).
type otelPropagate struct{}

// ID implements middleware.FinalizeMiddleware.
func (otelPropagate) ID() string { return "TurnstileOTelPropagate" }

// HandleFinalize implements middleware.FinalizeMiddleware.
func (otelPropagate) HandleFinalize(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (
	middleware.FinalizeOutput, middleware.Metadata, error,
) {
	if req, ok := in.Request.(*smithyhttp.Request); ok {
		xrayPropagator{}.Inject(ctx, propagation.HeaderCarrier(req.Header))
	}
	return next.HandleFinalize(ctx, in)
}

// TraceHandler returns h traced with OpenTelemetry when that back end is on
// (TracingEnabled and TracingMode is TracingOTel): each invocation runs in a server span
// named after the function, child of the trace Lambda passed in (the X-Amzn-Trace-Id of
// the invocation), and its spans are exported before the handler returns. Otherwise it
// returns h itself: with X-Ray, the segment is Lambda's own and the SDK's subsegments
// attach to it through the context.
func TraceHandler(h lambda.Handler) lambda.Handler {
	if !TracingEnabled() || TracingMode() != TracingOTel {
		return h
	}
	tp, err := otelTracerProvider()
	if err != nil {
		Logger().Warn("OpenTelemetry setup failed; invocations are not traced", "error", err)
		return h
	}
	return &otelHandler{next: h, tp: tp, tracer: tp.Tracer(otelScope), name: os.Getenv("AWS_LAMBDA_FUNCTION_NAME")}
}

type otelHandler struct {
	next   lambda.Handler
	tp     *sdktrace.TracerProvider
	tracer trace.Tracer
	name   string
	warm   atomic.Bool
}

// Invoke implements lambda.Handler.
func (o *otelHandler) Invoke(ctx context.Context, payload []byte) ([]byte, error) {
	ctx = xrayPropagator{}.Extract(ctx, propagation.MapCarrier{XRayTraceHeader: invocationTraceHeader(ctx)})
	attrs := []attribute.KeyValue{semconv.FaaSColdstart(!o.warm.Swap(true))}
	if lc, ok := lambdacontext.FromContext(ctx); ok {
		attrs = append(attrs, semconv.FaaSInvocationID(lc.AwsRequestID), semconv.CloudResourceID(lc.InvokedFunctionArn))
	}
	ctx, span := o.tracer.Start(ctx, o.name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	out, err := o.next.Invoke(ctx, payload)
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
	o.flush(ctx)
	return out, err
}

// flush exports the invocation's spans, within flushTimeout and the invocation's deadline.
func (o *otelHandler) flush(ctx context.Context) {
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), flushTimeout)
	defer cancel()
	if d, ok := ctx.Deadline(); ok {
		var c2 context.CancelFunc
		fctx, c2 = context.WithDeadline(fctx, d)
		defer c2()
	}
	if err := o.tp.ForceFlush(fctx); err != nil {
		Logger().WarnContext(ctx, "exporting trace spans failed", "error", err, "endpoint", otlpEndpoint())
	}
}

// otlpEndpoint names where spans are sent, for messages.
func otlpEndpoint() string {
	for _, k := range slices.Backward(OTLPEndpointEnvs) { // the traces-only one wins
		if v := os.Getenv(k); v != "" {
			return v
		}
	}
	return DefaultOTLPEndpoint
}

// invocationTraceHeader returns the invocation's X-Ray trace header: aws-lambda-go puts
// it in the context (under the string key "x-amzn-trace-id") and in _X_AMZN_TRACE_ID.
func invocationTraceHeader(ctx context.Context) string {
	if h, ok := ctx.Value("x-amzn-trace-id").(string); ok && h != "" {
		return h
	}
	return os.Getenv("_X_AMZN_TRACE_ID")
}
