// The queue shape asked for at CreateQueue (docs/sqs.md, "CreateQueue"): casque.* attributes and casque:* tags
// through the Go SDK v2, which passes attribute names and tags through as strings.
// Run as: sqscheck ENDPOINT QUEUE_NAME shape (main.go sets up the client and prints the result).
package main

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"
)

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
