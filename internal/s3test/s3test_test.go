package s3test

import (
	"context"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

func TestStart(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	c := s.Client()
	if _, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b"), Body: strings.NewReader("hello")}); err != nil {
		t.Fatal(err)
	}
	// The server honours conditional writes: a second create is refused.
	_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.Bucket), Key: aws.String("a/b"), Body: strings.NewReader("again"), IfNoneMatch: aws.String("*")})
	if err == nil || !strings.Contains(err.Error(), "412") {
		t.Fatalf("conditional overwrite: %v, want 412", err)
	}
}
