package obs

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/aws/smithy-go/logging"
)

// SDKSource is the "source" attribute of the AWS SDK's messages in the functions' logs.
const SDKSource = "aws-sdk-go-v2"

// The beginnings of the two warnings smithy-go's CloseResponseBody logs when it cannot read a
// response body to its end or close it cleanly (smithy-go transport/http).
const (
	sdkDiscardBodyWarning = "failed to discard remaining HTTP response body"
	sdkCloseBodyWarning   = "failed to close HTTP response body"
)

// SDKLogger returns the logger AWSConfig gives the AWS SDK (aws.Config.Logger). The SDK's
// messages go to l instead of the SDK's default, plain-text lines on stderr: a WARN at
// slog.LevelWarn and a DEBUG at slog.LevelDebug, with source=aws-sdk-go-v2 and, through the
// call's context, the invocation's request id.
//
// One case is demoted to DEBUG: the body-close warnings of a call whose context had already
// ended. DynamoDB responses carry a CRC32 of their body (header X-Amz-Crc32); the dynamodb
// client checks it when the body is closed (its DynamoDB:ResponseChecksumValidation
// middleware), and smithy-go closes every response body after deserializing it, reading any
// rest first (transport/http.CloseResponseBody). When the call's context ends — a deadline,
// a lock waiter giving up, a renewal stopped by Release, an AcquireAll cancelling its other
// keys — while the body is still arriving, the read stops part-way, the CRC covers part of
// the body only, and the SDK logs two warnings:
//
//	failed to discard remaining HTTP response body, this may affect connection reuse: ... use of closed network connection
//	failed to close HTTP response body, this may affect connection reuse: response did not match expected checksum, X, Y
//
// The call has already failed with the context's error and its response was never used, so
// there is nothing to warn about: contention (many waiters with deadlines) made these the
// commonest lines of a busy function's log. With the context still live the warnings stay
// warnings: then the bytes received differ from those DynamoDB sent (a connection broken
// mid-body, or something in between that altered the body) and the SDK, which does not fail
// a call whose body it could parse, says so only here. The checksum validation itself stays
// on (dynamodb.Options.DisableValidateResponseChecksum is never set).
func SDKLogger(l *slog.Logger) logging.Logger {
	return sdkLogger{l: l, ctx: context.Background()}
}

type sdkLogger struct {
	l   *slog.Logger
	ctx context.Context
}

// WithContext implements logging.ContextLogger: the SDK passes each call's context.
func (s sdkLogger) WithContext(ctx context.Context) logging.Logger {
	return sdkLogger{l: s.l, ctx: ctx}
}

// Logf implements logging.Logger.
func (s sdkLogger) Logf(classification logging.Classification, format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	level := slog.LevelInfo
	switch classification {
	case logging.Warn:
		level = slog.LevelWarn
		if s.ctx.Err() != nil && (strings.HasPrefix(msg, sdkDiscardBodyWarning) || strings.HasPrefix(msg, sdkCloseBodyWarning)) {
			s.l.Log(s.ctx, slog.LevelDebug, msg, "source", SDKSource,
				"reason", "the call's context ended while the response body was read; the call failed with "+s.ctx.Err().Error())
			return
		}
	case logging.Debug:
		level = slog.LevelDebug
	}
	s.l.Log(s.ctx, level, msg, "source", SDKSource)
}
