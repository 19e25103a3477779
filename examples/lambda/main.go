// Command lambda is the smallest useful Lambda on lockcore: an SQS handler that works on
// each order under a lock, fenced, and hands contended messages back to SQS.
package main

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

func main() {
	cfg, err := config.LoadDefaultConfig(context.Background())
	if err != nil {
		panic(err) // no credentials or region: the function cannot start
	}
	locks, err := lockcore.NewMutex(dynamodb.NewFromConfig(cfg), os.Getenv("LOCK_TABLE"))
	if err != nil {
		panic(err) // a configuration error, reported at cold start
	}
	lambda.Start(func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		for _, m := range ev.Records {
			err := lockcore.Do(ctx, locks, "order#"+m.MessageId, func(ctx context.Context, l *lockcore.Lease) error {
				return process(ctx, m.Body, l.Token()) // write with the token, or add locks.GuardCheck(l)
			}, lockcore.WaitUpTo(2*time.Second))
			if err != nil { // held, lost or failed: SQS delivers the message again
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: m.MessageId})
			}
		}
		return resp, nil
	})
}

// process stands for the application's work on one message.
func process(ctx context.Context, body string, token lockcore.Fence) error {
	if body == "" {
		return errors.New("empty message")
	}
	return ctx.Err()
}
