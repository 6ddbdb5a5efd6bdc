#!/bin/bash
# The runs of this folder, on an nvidia-h100-x4 machine, from the repository root there, with
# dist-base/b/ holding the xz'd output of `scripts/gpu-check build` (cohort and the three test
# executables) and dist-base/debs/ scripts/debs.sh's memcached packages, both carried.
# Modes, one call each, in this order on one lease: `tests`: every GPU check (scripts/gpu-check). `inproc`: the sharded
# ratio's cause (k-NN 1M in process, gpu-persistent and gpu-cohort, replicated and sharded on
# 1/2/4 GPUs, f32 and u8 storage, NVLink byte counters around each run) and LeNet on one GPU
# beside PyTorch. `served10m`: the 10M index served on 8 cores, 1 GPU and 4, anchor first.
set -u
export CUDA_MODULE_LOADING=EAGER NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
mkdir -p dist/debs
cp dist-base/debs/*.deb dist/debs/ 2>/dev/null
for f in dist-base/b/*.xz; do n=$(basename $f .xz); [ -x dist/$n ] || { xz -dc $f > dist/$n; chmod +x dist/$n; }; done
nvidia-smi -L > $OUT/gpus.txt
B=dist/cohort
nvl() { # total NVLink data KiB sent and received, per GPU: "gpu tx rx ..."
    nvidia-smi nvlink -gt d 2>/dev/null | awk '/^GPU/{g=$2} /Tx/{tx[g]+=$(NF-1)} /Rx/{rx[g]+=$(NF-1)} END{for(k in tx) printf "%s %d %d ", k, tx[k], rx[k]; print ""}'
}
case "$1" in
tests)
    OUT=$OUT/tests scripts/gpu-check run tests 2>&1 | tail -40
    ;;
inproc)
    R=$OUT/r; mkdir -p $R
    nvidia-smi topo -m > $R/topo.txt 2>&1; nvidia-smi nvlink -s > $R/nvlink-status.txt 2>&1
    D=/tmp/k/sift-like-1m; IX=$D/ivf4096.index
    [ -f $D/groundtruth.ivecs ] || $B data synth --n 1000000 --dim 128 --queries 1000 --out $D --log-level warn
    [ -f $IX ] || $B index build --base $D/base.fvecs --nlist 4096 --out $IX --log-level warn
    K="--data $D --nlist 4096 --nprobe 16 --k 10 --duration 2 --log-level warn"
    for p in f32 u8; do
      for e in gpu-persistent gpu-cohort; do
        if [ $e = gpu-persistent ]; then E="--engines $e --drivers 4 --service-opt knn.gpu_slots=8192"; else E="--engines $e --drivers 8 --max-cohort 2048"; fi
        for run in 0:replicate 0,1:shard 0,1,2,3:replicate 0,1,2,3:shard; do
            IFS=: read g pl <<< "$run"; n=$(echo $g | tr -cd , | wc -c); n=$((n + 1))
            case $n in 1) w=8192,16384;; 2) w=16384;; 4) w=32768;; esac
            name=$e-$p-g$n-$pl
            a=$(nvl); t0=$(date +%s.%N)
            timeout 120 $B bench engine $K $E --gpus $g --service-opt knn.placement=$pl --gpu-precision $p \
                --window $w --out $R/$name.json > $R/$name.log 2>&1 || echo "$name failed"
            t1=$(date +%s.%N); b=$(nvl)
            echo "$name nvlink_before: $a" >> $R/nvlink.txt; echo "$name nvlink_after: $b secs $(awk "BEGIN{print $t1 - $t0}")" >> $R/nvlink.txt
            best=$(python3 -c "import json,sys;d=json.load(open(sys.argv[1]));print(' '.join('w%d:%.3fM' % (x['window'], x['queries_per_s']/1e6) for x in d['results']))" $R/$name.json 2>/dev/null)
            echo "$name best $best"
        done
      done
    done
    # LeNet on GPU 0: Cohort's gpu-cohort by control threads, then PyTorch on the same GPU.
    for c in 1 2 3; do
        timeout 100 $B bench engine --service lenet --engines gpu-cohort --gpus 0 --control-threads $c \
            --window 8192,16384 --max-cohort 8192 --duration 2 --drivers 8 --out $R/lenet-gpu-cohort-c$c.json --log-level warn > $R/lenet-c$c.log 2>&1 || echo "lenet c$c failed"
        tail -4 $R/lenet-c$c.log
    done
    CUDA_VISIBLE_DEVICES=0 timeout 120 python3 bench/pytorch/lenet.py --batches 1024,8192,16384 --out $R/lenet-pytorch.json 2>&1 | tail -14
    (cd $R && tar czf $OUT/inproc.tgz .)
    ;;
served10m)
    R=$OUT/r; mkdir -p $R
    OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 TAG=10m RATES=${RATES:-100k,200k,300k,400k,600k} NODES=9 \
        SINGLE_GPUS=1 timeout 380 scripts/cluster-served.sh knn 2>&1 | tail -20
    OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 TAG=10m RATES=${RATES:-100k,200k,300k,400k,600k} NODES=9 ANCHOR=0 \
        SINGLE_GPUS=4 timeout 150 scripts/cluster-served.sh knn 2>&1 | tail -12
    (cd $R && tar czf $OUT/served10m.tgz .)
    ;;
served10m-fine)
    # The same, with finer rates around each configuration's p99 <= 1 ms limit (the index
    # is kept on the machine from the call before).
    R=$OUT/r; mkdir -p $R
    OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 TAG=10m RATES=100k,125k,150k,175k NODES=9 \
        SINGLE_GPUS=1 timeout 300 scripts/cluster-served.sh knn 2>&1 | tail -16
    OUT=$R WORK=/tmp/cw N=10000000 NLIST=16384 NPROBE=32 TAG=10m-b RATES=350k,400k,450k,500k NODES=9 ANCHOR=0 \
        SINGLE_GPUS=4 timeout 150 scripts/cluster-served.sh knn 2>&1 | tail -8
    (cd $R && tar czf $OUT/served10m-fine.tgz .)
    ;;
esac
