// Package obs is the observability and AWS wiring shared by the Lambda functions: JSON logs
// with the Lambda request id (log/slog), the AWS SDK configuration (with DYNAMODB_ENDPOINT
// for a local engine), tracing of invocations and SDK calls behind one small seam (X-Ray or
// OpenTelemetry, trace.go), and CloudWatch Embedded Format metrics.
package obs

import (
	"context"
	"encoding/json"
	"io"
	"log"
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
// With POWERTOOLS_SERVICE_NAME set (ServiceName), every record has "service", as Powertools'
// logger writes it. The level is Lambda's (LoggingConfig.ApplicationLogLevel); as in
// Powertools, where that is set it wins over POWERTOOLS_LOG_LEVEL, which is not read here.
func Logger() *slog.Logger {
	loggerOnce.Do(func() { logger = newLogger(os.Stderr) })
	return logger
}

// newLogger builds Logger's logger; w receives the records outside Lambda.
func newLogger(w io.Writer) *slog.Logger {
	var l *slog.Logger
	if os.Getenv("AWS_LAMBDA_LOG_FORMAT") != "" {
		l = lambdacontext.NewLogger()
	} else {
		l = slog.New(NewHandler(w, ParseLevel(os.Getenv("AWS_LAMBDA_LOG_LEVEL"))))
	}
	if svc := ServiceName(); svc != "" {
		l = l.With(ServiceDimension, svc)
	}
	return l
}

// Setup makes Logger the default slog logger (and so the destination of the standard log
// package too) and returns it. Call it first thing in main.
//
// The standard log package's lines go to the logger at INFO, except one: aws-lambda-go
// prints the error document of every failed invocation ({"errorMessage":...,
// "errorType":...}) before reporting it. The handlers log each failure themselves, at
// ERROR or WARN with its fields, so that copy goes to DEBUG: each failure is logged once.
func Setup() *slog.Logger {
	l := Logger()
	slog.SetDefault(l)
	log.SetFlags(0)
	log.SetOutput(StdLogWriter(l))
	return l
}

// StdLogWriter returns the writer Setup gives the standard log package: each line goes to
// l at INFO, a Lambda runtime error report at DEBUG ("runtime error report").
func StdLogWriter(l *slog.Logger) io.Writer { return stdLogWriter{l} }

type stdLogWriter struct{ l *slog.Logger }

func (w stdLogWriter) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	if isRuntimeErrorReport(line) {
		w.l.Debug("runtime error report", "payload", json.RawMessage(line))
	} else {
		w.l.Info(line)
	}
	return len(p), nil
}

// isRuntimeErrorReport reports whether line is the error document aws-lambda-go logs for
// a failed invocation: a JSON object with errorMessage and errorType and nothing else but
// stackTrace.
func isRuntimeErrorReport(line string) bool {
	if !strings.HasPrefix(line, "{") || !json.Valid([]byte(line)) {
		return false
	}
	var doc map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &doc) != nil {
		return false
	}
	_, msg := doc["errorMessage"]
	_, typ := doc["errorType"]
	for k := range doc {
		if k != "errorMessage" && k != "errorType" && k != "stackTrace" {
			return false
		}
	}
	return msg && typ
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
