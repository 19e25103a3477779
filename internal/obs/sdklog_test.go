package obs

import (
	"bytes"
	"context"
	"hash/crc32"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// sdkLogTestClient returns a DynamoDB client on srv whose SDK messages go through SDKLogger
// to buf (at DEBUG and above), and a channel closed when the first response's headers have
// arrived (the body may still be on its way).
func sdkLogTestClient(t *testing.T, srv *httptest.Server, buf *syncBuffer) (*dynamodb.Client, <-chan struct{}) {
	t.Helper()
	headers := make(chan struct{})
	var once sync.Once
	transport := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(transport.CloseIdleConnections)
	cfg := aws.Config{
		Region:       "us-east-1",
		Credentials:  credentials.NewStaticCredentialsProvider("local", "local", ""),
		BaseEndpoint: aws.String(srv.URL),
		HTTPClient: &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := transport.RoundTrip(r)
			if err == nil {
				once.Do(func() { close(headers) })
			}
			return resp, err
		})},
		RetryMaxAttempts: 1,
		Logger:           SDKLogger(slog.New(NewHandler(buf, slog.LevelDebug))),
	}
	return dynamodb.NewFromConfig(cfg), headers
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func getItemInput() *dynamodb.GetItemInput {
	return &dynamodb.GetItemInput{TableName: aws.String("t"), Key: map[string]types.AttributeValue{"pk": &types.AttributeValueMemberS{Value: "k"}}}
}

// TestSDKLoggerCancelledBodyReadIsDebug: a call whose context ends while the response body is
// still arriving fails with the context's error; the SDK's two body-close warnings of it
// ("failed to discard remaining HTTP response body", "failed to close HTTP response body ...
// response did not match expected checksum") are logged at DEBUG, not WARN.
func TestSDKLoggerCancelledBodyReadIsDebug(t *testing.T) {
	body := []byte(`{"Item":{"pk":{"S":"k"},"v":{"S":"` + strings.Repeat("x", 64<<10) + `"}}}`)
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)), 10))
		w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(body[:len(body)/2])
		w.(http.Flusher).Flush()
		select { // the rest never comes while the client waits
		case <-release:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(release)
	var buf syncBuffer
	client, headers := sdkLogTestClient(t, srv, &buf)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := client.GetItem(ctx, getItemInput())
		done <- err
	}()
	<-headers // the body is being read
	cancel()
	if err := <-done; err == nil {
		t.Fatal("GetItem succeeded on half a body")
	}
	out := buf.String()
	if strings.Contains(out, `"level":"WARN"`) {
		t.Errorf("a cancelled call's body-close warnings were logged at WARN:\n%s", out)
	}
	if !strings.Contains(out, `"level":"DEBUG","message":"failed to close HTTP response body, this may affect connection reuse: response did not match expected checksum`) ||
		!strings.Contains(out, `"source":"`+SDKSource+`"`) {
		t.Errorf("the checksum warning of the cancelled read is not at DEBUG:\n%s", out)
	}
}

// TestSDKLoggerChecksumMismatchStaysWarn: a body that does not match its X-Amz-Crc32 with the
// call's context live is corruption (or truncation) in transit; the SDK does not fail the call
// (it parsed the body), so its warning is the only signal and stays a WARN.
func TestSDKLoggerChecksumMismatchStaysWarn(t *testing.T) {
	body := []byte(`{"Item":{"pk":{"S":"k"}}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.Header().Set("X-Amz-Crc32", strconv.FormatUint(uint64(crc32.ChecksumIEEE(body)+1), 10))
		_, _ = w.Write(body)
	}))
	defer srv.Close()
	var buf syncBuffer
	client, _ := sdkLogTestClient(t, srv, &buf)
	if _, err := client.GetItem(context.Background(), getItemInput()); err != nil {
		t.Logf("GetItem: %v (the SDK version in use fails the call on a mismatch)", err)
	}
	if out := buf.String(); !strings.Contains(out, `"level":"WARN","message":"failed to close HTTP response body, this may affect connection reuse: response did not match expected checksum`) {
		t.Errorf("checksum mismatch on a live call not logged at WARN:\n%s", out)
	}
}

// TestAWSConfigUsesSDKLogger: the functions' SDK clients log through SDKLogger.
func TestAWSConfigUsesSDKLogger(t *testing.T) {
	isolateAWSEnv(t)
	t.Setenv("AWS_REGION", "us-east-1")
	cfg, err := AWSConfig(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := cfg.Logger.(sdkLogger); !ok {
		t.Errorf("aws.Config.Logger = %T, want SDKLogger's", cfg.Logger)
	}
}
