package ddblocal

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

func TestEnsureMissingTools(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := Ensure(t.Context(), t.TempDir())
	if err == nil {
		t.Fatal("Ensure succeeded without java and mvn")
	}
	for _, want := range []string{"java", "Java 17", "mvn", "Maven", EnvEndpoint} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if _, err := Start(t.Context(), Options{CacheDir: t.TempDir(), LibDir: t.TempDir()}); err == nil ||
		!strings.Contains(err.Error(), "Java 17") {
		t.Errorf("Start without java: %v", err)
	}
}

// TestEnsureFetchOnce fetches into an empty cache from two goroutines at once: the file lock
// makes one of them fetch and the other reuse the result.
func TestEnsureFetchOnce(t *testing.T) {
	cacheDir := t.TempDir()
	var wg sync.WaitGroup
	dirs := make([]string, 2)
	errs := make([]error, 2)
	for i := range dirs {
		wg.Go(func() { dirs[i], errs[i] = Ensure(t.Context(), cacheDir) })
	}
	wg.Wait()
	for i := range dirs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if dirs[i] != filepath.Join(cacheDir, "lib") {
			t.Errorf("libDir %s", dirs[i])
		}
	}
	for _, f := range []string{markerFile, nativeLib, "DynamoDBLocal-3.1.0.jar"} {
		if _, err := os.Stat(filepath.Join(cacheDir, "lib", f)); err != nil {
			t.Error(err)
		}
	}
	// Once cached, mvn is not needed any more.
	javaPath, err := exec.LookPath("java")
	if err != nil {
		t.Fatal(err)
	}
	binDir := t.TempDir()
	if err := os.Symlink(javaPath, filepath.Join(binDir, "java")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", binDir)
	if _, err := Ensure(t.Context(), cacheDir); err != nil {
		t.Errorf("cached Ensure without mvn: %v", err)
	}
}

func TestStartStop(t *testing.T) {
	e, err := Start(t.Context(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	if e.PID() <= 0 || !strings.HasPrefix(e.Endpoint(), "http://127.0.0.1:") {
		t.Fatalf("pid %d endpoint %s", e.PID(), e.Endpoint())
	}
	if !IsEngine(e.PID()) {
		t.Error("IsEngine(pid) = false for a running engine")
	}
	client, err := NewClient(t.Context(), e.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.ListTables(t.Context(), &dynamodb.ListTablesInput{}); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := e.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if alive(e.PID()) {
		t.Error("engine still alive after Stop")
	}
	err = Ping(t.Context(), e.Endpoint(), 5*time.Second)
	var unreachable *UnreachableError
	if !errors.As(err, &unreachable) || unreachable.Endpoint != e.Endpoint() {
		t.Errorf("Ping of a stopped engine: %v", err)
	}
}

func TestStopPIDDetached(t *testing.T) {
	e, err := Start(t.Context(), Options{Detach: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Stop() })
	if err := StopPID(e.PID(), 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if IsEngine(e.PID()) {
		t.Error("engine alive after StopPID")
	}
}

func TestStartFailureShowsLog(t *testing.T) {
	_, err := Start(t.Context(), Options{LibDir: t.TempDir(), LogPath: filepath.Join(t.TempDir(), "engine.log"), StartTimeout: 30 * time.Second})
	if err == nil {
		t.Fatal("Start with an empty lib dir succeeded")
	}
	if !strings.Contains(err.Error(), MainClass) || !strings.Contains(err.Error(), "last lines of") {
		t.Errorf("error does not carry the log tail: %v", err)
	}
}

func TestStartPortTaken(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	port := l.Addr().(*net.TCPAddr).Port
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	e, err := Start(ctx, Options{Port: port, LogPath: filepath.Join(t.TempDir(), "engine.log"), StartTimeout: 20 * time.Second})
	if err == nil {
		_ = e.Stop()
		t.Fatal("Start on a taken port succeeded")
	}
	if !strings.Contains(err.Error(), strconv.Itoa(port)) {
		t.Errorf("error does not name the port: %v", err)
	}
	t.Log(err)
}
