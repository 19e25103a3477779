// Package obs is the observability and AWS wiring shared by the Lambda functions: JSON logs
// with the Lambda request id (log/slog), the AWS SDK configuration (with DYNAMODB_ENDPOINT
// for a local engine), X-Ray instrumentation of the SDK behind one small seam, and CloudWatch
// Embedded Format metrics.
package obs

import (
	"context"
	"io"
	"log/slog"
	"os"
	"strings"
	"sync"

	"github.com/aws/aws-lambda-go/lambdacontext"
)

// RequestIDKey is the log attribute holding the Lambda request id (the key aws-lambda-go's
// lambdacontext log handler uses).
const RequestIDKey = "requestId"

var (
	loggerOnce sync.Once
	logger     *slog.Logger
)

// Logger returns the process-wide structured logger.
//
// Under Lambda (and under the local runtime emulation, which sets the same variables) the
// function's LoggingConfig reaches the process as AWS_LAMBDA_LOG_FORMAT / AWS_LAMBDA_LOG_LEVEL
// and the logger is aws-lambda-go's lambdacontext log handler: JSON on stdout with
// "timestamp", "level", "message" and the invocation's "requestId" taken from the context, so
// use the *Context logging methods (InfoContext, ...). Elsewhere (tests, tools) it is a JSON
// handler with the same keys on stderr, at the level AWS_LAMBDA_LOG_LEVEL names (default INFO).
func Logger() *slog.Logger {
	loggerOnce.Do(func() {
		if os.Getenv("AWS_LAMBDA_LOG_FORMAT") != "" {
			logger = lambdacontext.NewLogger()
			return
		}
		logger = slog.New(NewHandler(os.Stderr, ParseLevel(os.Getenv("AWS_LAMBDA_LOG_LEVEL"))))
	})
	return logger
}

// Setup makes Logger the default slog logger (and so the destination of the standard log
// package too) and returns it. Call it first thing in main.
func Setup() *slog.Logger {
	l := Logger()
	slog.SetDefault(l)
	return l
}

// NewHandler returns a JSON slog handler writing to w that produces the same records as
// aws-lambda-go's lambdacontext handler in JSON mode: "time" is renamed "timestamp", "msg"
// "message", and a Lambda context in the record's context adds "requestId".
func NewHandler(w io.Writer, level slog.Leveler) slog.Handler {
	return requestIDHandler{slog.NewJSONHandler(w, &slog.HandlerOptions{
		Level:       level,
		ReplaceAttr: lambdacontext.ReplaceAttr,
	})}
}

// ParseLevel maps Lambda's log level names (DEBUG, INFO, WARN, ERROR; TRACE and FATAL are
// folded into DEBUG and ERROR) to slog levels; anything else is INFO.
func ParseLevel(s string) slog.Level {
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "TRACE", "DEBUG":
		return slog.LevelDebug
	case "WARN", "WARNING":
		return slog.LevelWarn
	case "ERROR", "FATAL":
		return slog.LevelError
	default:
		return slog.LevelInfo
	}
}

// requestIDHandler adds the Lambda request id of the record's context.
type requestIDHandler struct{ slog.Handler }

// Handle adds the request id of ctx's Lambda context, if any, and passes r on.
func (h requestIDHandler) Handle(ctx context.Context, r slog.Record) error {
	if lc, ok := lambdacontext.FromContext(ctx); ok && lc.AwsRequestID != "" {
		r.AddAttrs(slog.String(RequestIDKey, lc.AwsRequestID))
	}
	return h.Handler.Handle(ctx, r)
}

// WithAttrs implements slog.Handler.
func (h requestIDHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return requestIDHandler{h.Handler.WithAttrs(as)}
}

// WithGroup implements slog.Handler.
func (h requestIDHandler) WithGroup(name string) slog.Handler {
	return requestIDHandler{h.Handler.WithGroup(name)}
}
