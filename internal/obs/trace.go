package obs

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/strategy/ctxmissing"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/aws/aws-xray-sdk-go/xraylog"
)

// This file is the tracing seam: InstrumentAWS (SDK calls) and TraceHandler (invocations)
// are all the functions call. Two back ends sit behind it, chosen by TURNSTILE_TRACING:
// the aws-xray-sdk-go (the default; in maintenance mode since 2026-02-25, end of support
// 2027-02-25) and OpenTelemetry with an OTLP exporter to the ADOT collector layer
// (otel.go). docs/deploy.md ("Tracing") has the timeline and the switch.

// TracingEnv names the variable that picks the tracing back end: TracingXRay (the default
// when unset) or TracingOTel. template.yaml sets it from its Tracing parameter.
const TracingEnv = "TURNSTILE_TRACING"

// Tracing back ends.
const (
	TracingXRay = "xray" // aws-xray-sdk-go: subsegments sent to the X-Ray daemon Lambda runs
	TracingOTel = "otel" // OpenTelemetry: spans sent over OTLP to the ADOT collector layer
)

// TracingMode returns the back end TURNSTILE_TRACING names: TracingOTel for "otel"
// (any case), TracingXRay when it is unset or "xray". Any other value is logged once and
// taken as TracingXRay: a mistyped value must not cost the function its traces, and the
// template allows only the two.
func TracingMode() string {
	switch v := strings.ToLower(strings.TrimSpace(os.Getenv(TracingEnv))); v {
	case "", TracingXRay:
		return TracingXRay
	case TracingOTel:
		return TracingOTel
	default:
		warnTracingMode.Do(func() {
			Logger().Warn("unknown tracing back end; using X-Ray", TracingEnv, v, "want", TracingXRay+" or "+TracingOTel)
		})
		return TracingXRay
	}
}

var warnTracingMode sync.Once

// TracingEnabled reports whether SDK calls and invocations should be traced: inside Lambda
// (the runtime environment sets AWS_LAMBDA_FUNCTION_NAME and LAMBDA_TASK_ROOT; the local
// runtime emulation of cmd/invoke sets no LAMBDA_TASK_ROOT), and then
//
//   - X-Ray (TracingMode): with an X-Ray daemon address (set when the function has active
//     tracing), unless AWS_XRAY_SDK_DISABLED=true;
//   - OpenTelemetry: unless OTEL_SDK_DISABLED=true (the SDK's standard switch), e.g. for
//     `sam local invoke`, where no collector listens.
func TracingEnabled() bool {
	if os.Getenv("AWS_LAMBDA_FUNCTION_NAME") == "" || os.Getenv("LAMBDA_TASK_ROOT") == "" {
		return false
	}
	if TracingMode() == TracingOTel {
		return !strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true")
	}
	if strings.EqualFold(os.Getenv("AWS_XRAY_SDK_DISABLED"), "true") {
		return false
	}
	return os.Getenv("AWS_XRAY_DAEMON_ADDRESS") != ""
}

var configureXRay sync.Once

// InstrumentAWS traces every AWS SDK call made with cfg when TracingEnabled, with the
// back end TracingMode names; otherwise it leaves cfg untouched.
//
// X-Ray: a subsegment per call. Calls made outside an invocation (init code) find no
// segment; the context-missing strategy only logs them (AWS_XRAY_CONTEXT_MISSING overrides
// it), and the SDK's own log goes through slog at WARN.
//
// OpenTelemetry: a client span per call (see instrumentOTel), child of the invocation's
// span (TraceHandler) or, outside an invocation, a root span.
func InstrumentAWS(cfg *aws.Config) {
	if !TracingEnabled() {
		return
	}
	if TracingMode() == TracingOTel {
		tp, err := otelTracerProvider()
		if err != nil {
			Logger().Warn("OpenTelemetry setup failed; SDK calls are not traced", "error", err)
			return
		}
		instrumentOTel(cfg, tp)
		return
	}
	configureXRay.Do(func() {
		xray.SetLogger(slogXRayLogger{})
		c := xray.Config{}
		if os.Getenv("AWS_XRAY_CONTEXT_MISSING") == "" {
			c.ContextMissingStrategy = ctxmissing.NewDefaultLogErrorStrategy()
		}
		if err := xray.Configure(c); err != nil {
			Logger().Warn("x-ray configuration failed; tracing SDK calls anyway", "error", err)
		}
	})
	awsv2.AWSV2Instrumentor(&cfg.APIOptions)
}

// slogXRayLogger sends the X-Ray SDK's own messages to slog, warnings and errors only.
type slogXRayLogger struct{}

// Log implements xraylog.Logger.
func (slogXRayLogger) Log(level xraylog.LogLevel, msg fmt.Stringer) {
	var l slog.Level
	switch level {
	case xraylog.LogLevelWarn:
		l = slog.LevelWarn
	case xraylog.LogLevelError:
		l = slog.LevelError
	default:
		return
	}
	Logger().Log(context.Background(), l, msg.String(), "source", "aws-xray-sdk-go")
}
