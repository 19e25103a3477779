// Command orderprocessor is the OrderProcessorFunction Lambda (template.yaml): it reserves
// stock for the orders of the orders queue. The logic is in package handler.
package main

import (
	"errors"
	"os"

	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/fnmain"
)

func main() {
	fnmain.Run(handler.FunctionName, func(e fnmain.Env) (any, error) {
		// ORDERS_QUEUE_URL (template.yaml: !Ref OrdersQueue) is where returned messages'
		// visibility is shortened (ChangeMessageVisibility).
		queueURL := os.Getenv("ORDERS_QUEUE_URL")
		if queueURL == "" {
			return nil, errors.New("ORDERS_QUEUE_URL is not set")
		}
		return handler.New(e.Service, handler.WithLogger(e.Log),
			handler.WithVisibility(sqs.NewFromConfig(e.Config), queueURL)).HandleJSON, nil
	})
}
