// Command orderprocessor is the OrderProcessorFunction Lambda (template.yaml): it reserves
// stock for the orders of the orders queue. The logic is in package handler.
package main

import (
	"github.com/turnstile-locks/turnstile/functions/orderprocessor/handler"
	"github.com/turnstile-locks/turnstile/internal/fnmain"
)

func main() {
	fnmain.Run(handler.FunctionName, func(e fnmain.Env) (any, error) {
		return handler.New(e.Service, handler.WithLogger(e.Log)).HandleJSON, nil
	})
}
