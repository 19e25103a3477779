// Package ctxtime has the one context-aware sleep the developer tools (bench, chaos,
// demo) and the sample application's service (shop) share. (lockcore keeps its own: it
// depends on the AWS SDK only.)
package ctxtime

import (
	"context"
	"time"
)

// Sleep waits d or until ctx ends, and returns ctx's error in that case.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
