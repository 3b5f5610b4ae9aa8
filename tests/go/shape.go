// The queue shape asked for at CreateQueue (docs/sqs.md, "CreateQueue"): casque.* attributes and casque:* tags
// through the Go SDK v2, which passes attribute names and tags through as strings.
// Usage: sqscheck ENDPOINT QUEUE_NAME shape   -> prints one JSON line of results, exit 0/1.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

// init runs the shape check instead of main when asked to (main.go's check is left as it is).
func init() {
	if len(os.Args) < 4 || os.Args[3] != "shape" {
		return
	}
	endpoint, name := os.Args[1], os.Args[2]
	ctx := context.Background()
	cfg, err := config.LoadDefaultConfig(ctx, config.WithRegion("us-east-1"), config.WithRetryMaxAttempts(1),
		config.WithCredentialsProvider(credentials.NewStaticCredentialsProvider("k", "s", "")))
	out := result{}
	if err == nil {
		client := sqs.NewFromConfig(cfg, func(o *sqs.Options) { o.BaseEndpoint = aws.String(endpoint) })
		err = shape(ctx, client, name, out)
	}
	if err != nil {
		out["fatal"] = err.Error()
	}
	line, _ := json.Marshal(out)
	fmt.Println(string(line))
	if err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

func shape(ctx context.Context, c *sqs.Client, name string, out result) error {
	asked := &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"casque.shards": "2", "casque.max_shards": "0"},
		Tags:       map[string]string{"casque:expire-after": "3600"}}
	created, err := c.CreateQueue(ctx, asked)
	if err != nil {
		return err
	}
	again, err := c.CreateQueue(ctx, asked)
	if err != nil {
		return err
	}
	out["again_same_url"] = *again.QueueUrl == *created.QueueUrl
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name),
		Attributes: map[string]string{"casque.shards": "3"}})
	out["different_shape"] = code(err)
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-bad"),
		Attributes: map[string]string{"casque.shards": "0"}})
	out["bad_attribute"] = code(err)
	_, err = c.CreateQueue(ctx, &sqs.CreateQueueInput{QueueName: aws.String(name + "-bad"),
		Tags: map[string]string{"casque:buckets": "many"}})
	out["bad_tag"] = code(err)
	return nil
}

// code is the error code the SDK parsed from the response (modeled or not), or "no error".
func code(err error) string {
	var api smithy.APIError
	if err == nil {
		return "no error"
	}
	if errors.As(err, &api) {
		return api.ErrorCode()
	}
	return "not an API error: " + err.Error()
}
