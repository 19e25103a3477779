package bench

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

// Describe reports the machine the bench runs on.
func Describe() Machine {
	m := Machine{Cores: runtime.NumCPU(), Go: runtime.Version(), LoadAvg0: LoadAvg()}
	m.CPU = procField("/proc/cpuinfo", "model name")
	if kb := procField("/proc/meminfo", "MemTotal"); kb != "" {
		if n, err := strconv.ParseFloat(strings.Fields(kb)[0], 64); err == nil {
			m.MemoryGB = fmt.Sprintf("%.0f GiB", n/(1<<20))
		}
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = "Linux " + strings.TrimSpace(string(b))
	}
	m.Engine = engineVersion()
	return m
}

// LoadAvg returns the 1, 5 and 15 minute load averages.
func LoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return ""
	}
	return strings.Join(f[:3], " ")
}

func procField(path, key string) string {
	fh, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func engineVersion() string {
	if ep := os.Getenv(ddblocal.EnvEndpoint); ep != "" {
		return "external engine at " + ep
	}
	dir, err := ddblocal.DefaultCacheDir()
	if err != nil {
		return "DynamoDB Local"
	}
	jars, _ := filepath.Glob(filepath.Join(dir, "lib", "DynamoDBLocal-*.jar"))
	if len(jars) == 0 {
		return "DynamoDB Local"
	}
	v := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(jars[0]), "DynamoDBLocal-"), ".jar")
	return "DynamoDB Local " + v + " (in-memory, shared DB)"
}
