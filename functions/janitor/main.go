// Command janitor is the JanitorFunction Lambda (template.yaml): it reports abandoned
// leases from the lock table's TTL deletions, re-drives their orders, sweeps long-expired
// lock rows and (with INVENTORY_TABLE) abandoned stock locks. The logic is in package
// handler.
package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/functions/janitor/handler"
	"github.com/turnstile-locks/turnstile/internal/fnmain"
)

func main() {
	fnmain.Run(handler.FunctionName, func(e fnmain.Env) (any, error) {
		minAge := handler.DefaultMinAge
		if v := os.Getenv("SWEEP_MIN_AGE_SECONDS"); v != "" {
			secs, err := strconv.Atoi(v)
			if err != nil || secs < 0 {
				return nil, fmt.Errorf("SWEEP_MIN_AGE_SECONDS must be a number of seconds, got %q", v)
			}
			minAge = time.Duration(secs) * time.Second
		}
		redriver := handler.SQSRedriver{Client: sqs.NewFromConfig(e.Config), QueueURL: os.Getenv("ORDERS_QUEUE_URL")}
		opts := []handler.Option{handler.WithLogger(e.Log), handler.WithMinAge(minAge)}
		if e.Tables.Inventory != "" {
			opts = append(opts, handler.WithStockSweep(e.Service))
		}
		h := handler.New(e.DB, e.Tables.Locks, e.Service, redriver, opts...)
		return h.Handle, nil
	})
}
