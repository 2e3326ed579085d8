set -u
b=build-bundle; o=$OUT/h100; mkdir -p $o
export TPSIM_DATA_DIR=$PWD/data
lt=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -1)
export LD_LIBRARY_PATH="$b/lib:$(dirname "$lt")"
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,power.limit --format=csv > $o/machine.txt 2>&1
s() { n=$1; shift; t0=$SECONDS; timeout 150 "$@" > $o/$n.txt 2>&1; echo "== $n: exit $? after $((SECONDS-t0)) s" >> $o/steps.txt; }
s suite $b/test_kernels_gpu --run_test=cuda --log_level=test_suite --report_level=short
s calibrate $b/tpsim calibrate kernels --backend cuda --budget 100 --out $o/profile.json
s replay1_calibrated $b/tpsim replay --backend cuda --model 125m --seq 2048 --micro-batch 8 --profile $o/profile.json
s replay2_calibrated $b/tpsim replay --backend cuda --model 350m --seq 2048 --micro-batch 2 --ckpt --profile $o/profile.json
s replay3_calibrated $b/tpsim replay --backend cuda --model 760m --seq 2048 --micro-batch 2 --layers 8 --profile $o/profile.json
s replay4_calibrated $b/tpsim replay --backend cuda --model 1b --seq 2048 --micro-batch 1 --ckpt --layers 8 --profile $o/profile.json
gzip $o/profile.json
tar czf $OUT/h100.tgz -C $OUT h100
cat $o/steps.txt; grep -E "ops checked" $o/suite.txt; grep -E "median" $o/calibrate.txt
