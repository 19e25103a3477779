// Package ddblocal fetches, starts and stops AWS DynamoDB Local, the local engine used by
// the tests, the demo and the developer tools.
//
// The engine comes from Maven Central (software.amazon.dynamodb:DynamoDBLocal, see pom.xml)
// and is cached in the project-local, git-ignored .cache/dynamodb-local directory. It needs
// Java 17+ to run and Maven to be fetched once.
package ddblocal

import (
	"bytes"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// pom is the Maven project that pins the DynamoDB Local version; mvn copies the artifact and
// its dependencies (including the sqlite4java native libraries) into the cache.
//
//go:embed pom.xml
var pom []byte

const (
	// libSubdir is the directory under the cache dir that holds the jars and native libraries.
	libSubdir = "lib"
	// markerFile is written into the lib dir after a complete, successful copy.
	markerFile = ".complete"
	// lockFile serialises concurrent fetches (several test binaries start at once).
	lockFile = ".fetch.lock"
	// nativeLib is the sqlite4java library DynamoDB Local needs on linux-amd64.
	nativeLib = "libsqlite4java-linux-amd64-1.0.392.so"
)

// FindRoot returns the project root: the nearest directory, starting at the working
// directory and walking up, that contains a go.mod file.
func FindRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("find project root: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("find project root: no go.mod in the working directory or any parent")
		}
		dir = parent
	}
}

// DefaultCacheDir returns <project root>/.cache/dynamodb-local.
func DefaultCacheDir() (string, error) {
	root, err := FindRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, ".cache", "dynamodb-local"), nil
}

// Ensure makes sure DynamoDB Local is present in cacheDir and returns the directory holding
// its jars and native libraries. The artifact is fetched with Maven only when it is not
// cached yet; concurrent callers (also in other processes) are serialised with a file lock,
// so the fetch happens once. Ensure fails with a single error naming what to install when
// java (and, for a fetch, mvn) is not on PATH.
func Ensure(ctx context.Context, cacheDir string) (libDir string, err error) {
	if cacheDir == "" {
		if cacheDir, err = DefaultCacheDir(); err != nil {
			return "", err
		}
	}
	libDir = filepath.Join(cacheDir, libSubdir)
	if complete(libDir) {
		return libDir, checkTools(false)
	}
	if err := checkTools(true); err != nil {
		return "", err
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", fmt.Errorf("create cache dir: %w", err)
	}

	unlock, err := lock(filepath.Join(cacheDir, lockFile))
	if err != nil {
		return "", err
	}
	defer unlock()
	if complete(libDir) { // another process fetched it while we waited for the lock
		return libDir, nil
	}
	if err := fetch(ctx, cacheDir, libDir); err != nil {
		return "", err
	}
	return libDir, nil
}

func complete(libDir string) bool {
	_, err := os.Stat(filepath.Join(libDir, markerFile))
	return err == nil
}

// checkTools reports the missing tools in one error.
func checkTools(needMaven bool) error {
	var missing []string
	if _, err := exec.LookPath("java"); err != nil {
		missing = append(missing, "java (install a Java 17+ runtime, e.g. apt-get install openjdk-17-jre-headless)")
	}
	if needMaven {
		if _, err := exec.LookPath("mvn"); err != nil {
			missing = append(missing, "mvn (install Maven 3, e.g. apt-get install maven; needed once to fetch DynamoDB Local)")
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("DynamoDB Local needs %s on PATH; or set DYNAMODB_ENDPOINT to a running engine",
		strings.Join(missing, " and "))
}

// lock takes an exclusive flock on path, blocking until it is free.
func lock(path string) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open fetch lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		_ = f.Close()
	}, nil
}

// fetch copies the artifact into a temporary directory and renames it into place, so that
// libDir is either absent or complete.
func fetch(ctx context.Context, cacheDir, libDir string) error {
	pomPath := filepath.Join(cacheDir, "pom.xml")
	if err := os.WriteFile(pomPath, pom, 0o644); err != nil {
		return fmt.Errorf("write pom: %w", err)
	}
	tmp, err := os.MkdirTemp(cacheDir, "lib-*")
	if err != nil {
		return fmt.Errorf("create temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)

	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "-f", pomPath,
		"dependency:copy-dependencies", "-DoutputDirectory="+tmp)
	cmd.Stdout = &out
	cmd.Stderr = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("fetch DynamoDB Local with mvn (needs network access to Maven Central): %w\n%s",
			err, tail(out.Bytes(), 40))
	}
	if _, err := os.Stat(filepath.Join(tmp, nativeLib)); err != nil {
		return fmt.Errorf("fetch DynamoDB Local: %s missing after mvn copy: %w", nativeLib, err)
	}
	if err := os.WriteFile(filepath.Join(tmp, markerFile), pom, 0o644); err != nil {
		return fmt.Errorf("write marker: %w", err)
	}
	if err := os.RemoveAll(libDir); err != nil {
		return fmt.Errorf("remove stale lib dir: %w", err)
	}
	if err := os.Rename(tmp, libDir); err != nil {
		return fmt.Errorf("install lib dir: %w", err)
	}
	return nil
}

// tail returns the last n lines of b.
func tail(b []byte, n int) string {
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
