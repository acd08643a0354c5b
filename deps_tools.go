//go:build tools

// Package tools pins the modules the toolkit depends on, so that go.mod
// lists them before any package imports them.
package tools

import (
	_ "github.com/aws/aws-sdk-go-v2/config"
	_ "github.com/aws/aws-sdk-go-v2/feature/s3/manager"
	_ "github.com/aws/aws-sdk-go-v2/service/s3"
	_ "github.com/jackc/pgx/v5"
	_ "github.com/linxGnu/grocksdb"
	_ "github.com/parquet-go/parquet-go"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/urfave/cli/v2"
	_ "go.ytsaurus.tech/yt/go/mapreduce"
	_ "go.ytsaurus.tech/yt/go/yson"
	_ "go.ytsaurus.tech/yt/go/yt/ythttp"
	_ "golang.org/x/net/html"
	_ "gonum.org/v1/plot"
	_ "google.golang.org/grpc"
	_ "google.golang.org/protobuf/proto"
	_ "gopkg.in/yaml.v3"
	_ "modernc.org/sqlite"
)
