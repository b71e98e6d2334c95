"""ONNX Runtime against PyTorch eager on the CPU: UperNet + MAViT-T, exported
with mmdeploy (a static deploy config per size, as mmdeploy's
``segmentation_onnxruntime_static-*`` configs are made).

Both sides run the network on the same preprocessed input, batch 1, and
produce the same thing, the argmax labels at the input size: PyTorch's
``encode_decode`` + argmax, and the exported graph (``with_argmax``). The two
alternate, run by run, in one process; medians and ratios go to JSON under
``benchmarks/results/``. ``benchmarks/readme_tables.py`` puts the table into
``docs/deployment.md``.

    python benchmarks/onnxruntime_speed.py                 # 512x512 and 512x2048
    python benchmarks/onnxruntime_speed.py --sizes 512x512 --repeats 2
"""
from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from mavit_mm.tooling.cli import image_size  # noqa: E402  (HEIGHTxWIDTH, checked)

CONFIG = 'configs/upernet/upernet_mavit-t_8xb2-160k_ade20k-512x512.py'


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--sizes', nargs='+', type=image_size,
                        default=[image_size('512x512'), image_size('512x2048')],
                        help='input sizes HEIGHTxWIDTH (default 512x512 512x2048)')
    parser.add_argument('--repeats', type=int, default=3, help='timed runs per side and size')
    parser.add_argument('--warmup', type=int, default=1, help='untimed runs per side and size')
    parser.add_argument('--out', type=Path, default=None,
                        help='JSON path (default benchmarks/results/onnxruntime-speed-cpu-DATE.json)')
    return parser.parse_args(argv)


def deploy_config(height: int, width: int, path: Path) -> str:
    from mmengine.config import Config
    Config(dict(
        onnx_config=dict(type='onnx', export_params=True, keep_initializers_as_inputs=False,
                         opset_version=11, save_file='end2end.onnx', input_names=['input'],
                         output_names=['output'], input_shape=[width, height], optimize=True),
        codebase_config=dict(type='mmseg', task='Segmentation', with_argmax=True),
        backend_config=dict(type='onnxruntime'))).dump(str(path))
    return str(path)


def main(argv=None) -> dict:
    args = parse_args(argv)
    import numpy as np
    import onnxruntime as ort
    import torch
    from mmdeploy.apis import torch2onnx

    from devtools.checkout import git_commit
    from mavit_mm.tooling.config import load_config
    from mavit_mm.tooling.device import device_name, library_versions
    from mavit_mm.tooling.model_builder import build_model
    work = Path(tempfile.mkdtemp(prefix='ort_speed_'))
    torch.manual_seed(0)
    model = build_model(load_config(str(REPO_ROOT / CONFIG))).eval()
    checkpoint = work / 'upernet.pth'
    torch.save({'state_dict': model.state_dict()}, checkpoint)
    rows = []
    started = time.time()
    for height, width in args.sizes:
        out = work / f'{height}x{width}'
        image = np.random.RandomState(0).randint(0, 255, (height, width, 3), dtype=np.uint8)
        print(f'[{height}x{width}] exporting with mmdeploy ...', flush=True)
        torch2onnx(image, str(out), 'end2end.onnx',
                   deploy_config(height, width, work / f'deploy_{height}x{width}.py'),
                   str(REPO_ROOT / CONFIG), str(checkpoint), device='cpu')
        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        session = ort.InferenceSession(str(out / 'end2end.onnx'), options,
                                       providers=['CPUExecutionProvider'])
        inputs = torch.randn(1, 3, height, width)
        metas = [dict(img_shape=(height, width), ori_shape=(height, width),
                      pad_shape=(height, width))]

        def run_torch():
            with torch.no_grad():
                return model.encode_decode(inputs, metas).argmax(dim=1)

        def run_ort():
            return session.run(None, {'input': inputs.numpy()})[0]

        agree = float((torch.from_numpy(run_ort()).reshape(1, height, width)
                       == run_torch()).float().mean())
        times = {'PyTorch': [], 'ONNX Runtime': []}
        for repeat in range(args.warmup + args.repeats):
            order = list(times) if repeat % 2 == 0 else list(times)[::-1]
            for name in order:
                begin = time.perf_counter()
                (run_torch if name == 'PyTorch' else run_ort)()
                if repeat >= args.warmup:
                    times[name].append(round(1e3 * (time.perf_counter() - begin), 2))
            elapsed = time.time() - started
            print(f'[{height}x{width} run {repeat + 1}/{args.warmup + args.repeats}] ' +
                  ', '.join(f'{n} {v[-1]:.0f} ms' for n, v in times.items() if v) +
                  f'; {elapsed:.0f} s so far', flush=True)
        medians = {name: statistics.median(values) for name, values in times.items()}
        rows.append(dict(shape=[height, width], times_ms=times, median_ms=medians,
                         speedup=round(medians['PyTorch'] / medians['ONNX Runtime'], 3),
                         label_agreement=agree))
    from mavit_mm.tooling.results_file import utc_timestamp, write_json
    report = dict(benchmark='onnxruntime-speed', config=CONFIG, model='UperNet + MAViT-T',
                  device=device_name(torch.device('cpu')), device_type='cpu',
                  cpu_threads=torch.get_num_threads(), versions=dict(
                      library_versions(), onnxruntime=ort.__version__),
                  commit=git_commit(),
                  date=utc_timestamp(),
                  dtype='fp32', batch_size=1, warmup=args.warmup, repeats=args.repeats,
                  exported_with='mmdeploy 1.3.1 torch2onnx, opset 11, static shape, with_argmax',
                  results=rows)
    path = args.out or (REPO_ROOT / 'benchmarks' / 'results' /
                        f'onnxruntime-speed-cpu-{time.strftime("%Y-%m-%d")}.json')
    write_json(path, report)
    for row in rows:
        print(f"{row['shape'][0]}x{row['shape'][1]}: PyTorch {row['median_ms']['PyTorch']:.0f} ms, "
              f"ONNX Runtime {row['median_ms']['ONNX Runtime']:.0f} ms, "
              f"speed-up {row['speedup']:.2f}, labels agree {row['label_agreement']:.4f}")
    print(f'wrote {path}')
    return report


if __name__ == '__main__':
    main()
