// Command probefn is a test-only Lambda function for cmd/invoke's tests: it uses the
// project's observability wiring (internal/obs) the way the real functions do, writes an
// item to LOCK_TABLE through DYNAMODB_ENDPOINT, sends the event to ORDERS_QUEUE_URL through
// the local SQS stand-in, and returns what it saw.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"

	"github.com/aws/aws-lambda-go/lambda"
	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/internal/obs"
)

type result struct {
	Env       map[string]string `json:"env"`
	Wrote     string            `json:"wrote"`
	MessageID string            `json:"messageId"`
}

func main() {
	log := obs.Setup()
	cfg, err := obs.AWSConfig(context.Background())
	if err != nil {
		log.Error("aws config", "error", err)
		os.Exit(1)
	}
	ddb := dynamodb.NewFromConfig(cfg)
	q := sqs.NewFromConfig(cfg)
	lambda.Start(func(ctx context.Context, ev json.RawMessage) (result, error) {
		var in struct {
			Fail string `json:"fail"`
		}
		_ = json.Unmarshal(ev, &in)
		if in.Fail != "" {
			log.ErrorContext(ctx, "failing on request", "reason", in.Fail)
			return result{}, errors.New(in.Fail)
		}
		r := result{Env: map[string]string{}}
		for _, k := range []string{"LOCK_TABLE", "ORDERS_TABLE", "ORDERS_QUEUE_URL", "STAGE", "SWEEP_MIN_AGE_SECONDS",
			"AWS_LAMBDA_LOG_FORMAT", "AWS_LAMBDA_LOG_LEVEL", "AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "DYNAMODB_ENDPOINT"} {
			r.Env[k] = os.Getenv(k)
		}
		table := os.Getenv("LOCK_TABLE")
		if _, err := ddb.PutItem(ctx, &dynamodb.PutItemInput{
			TableName: aws.String(table),
			Item: map[string]types.AttributeValue{
				"pk": &types.AttributeValueMemberS{Value: "probe"},
				"sk": &types.AttributeValueMemberS{Value: "lease"},
			},
		}); err != nil {
			return r, err
		}
		r.Wrote = table
		out, err := q.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(os.Getenv("ORDERS_QUEUE_URL")), MessageBody: aws.String(string(ev))})
		if err != nil {
			return r, err
		}
		r.MessageID = aws.ToString(out.MessageId)
		log.InfoContext(ctx, "probe done", "table", table)
		m := obs.Metrics(ctx, "probe")
		m.PutMetric("Probes", 1, "Count")
		return r, m.Flush()
	})
}
