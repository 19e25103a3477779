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

// This file is the tracing seam: everything X-Ray specific lives here, so replacing the
// aws-xray-sdk-go (in maintenance mode) with OpenTelemetry means replacing InstrumentAWS.

// TracingEnabled reports whether SDK calls should be traced: inside Lambda (the runtime
// environment sets AWS_LAMBDA_FUNCTION_NAME and LAMBDA_TASK_ROOT), with an X-Ray daemon
// address (set when the function has tracing), and unless AWS_XRAY_SDK_DISABLED=true.
func TracingEnabled() bool {
	if strings.EqualFold(os.Getenv("AWS_XRAY_SDK_DISABLED"), "true") {
		return false
	}
	return os.Getenv("AWS_LAMBDA_FUNCTION_NAME") != "" &&
		os.Getenv("LAMBDA_TASK_ROOT") != "" &&
		os.Getenv("AWS_XRAY_DAEMON_ADDRESS") != ""
}

var configureXRay sync.Once

// InstrumentAWS adds X-Ray subsegments for every AWS SDK call made with cfg when
// TracingEnabled; otherwise it leaves cfg untouched. Calls made outside an invocation
// (init code) find no segment; the context-missing strategy only logs them
// (AWS_XRAY_CONTEXT_MISSING overrides it), and the SDK's own log goes through slog at WARN.
func InstrumentAWS(cfg *aws.Config) {
	if !TracingEnabled() {
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
