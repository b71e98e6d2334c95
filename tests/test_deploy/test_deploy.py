"""Deployment to ONNX Runtime through mmdeploy's public API, as its
``tools/deploy.py`` and ``tools/test.py`` call it, on the bundled demo data.

Every check compares ONNX Runtime with PyTorch on the same preprocessed input
(``task_processor.create_input``'s, or the evaluation's, checked equal) and
through the same evaluation (``task_processor.build_test_runner``):
segmentation labels, detections and masks, and the metric each reaches. The
compatibility mmdeploy 1.3.1 needs on torch 2.13 comes from the model config's
``custom_imports`` (``mavit_mm.deploy``), never from the test.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

pytest.importorskip('onnxruntime')
pytest.importorskip('mmdeploy.apis')
pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed for the detectors')

from helpers.paths import REPO_ROOT  # noqa: E402
from helpers.shared_runs import COCO_SETTINGS, MASK_RCNN_CONFIG  # noqa: E402
from helpers.tools import retarget_data_root  # noqa: E402
from mmdeploy.apis import torch2onnx  # noqa: E402
from mmdeploy.apis.utils import build_task_processor  # noqa: E402
from mmdeploy.utils import get_input_shape  # noqa: E402
from mmdeploy.utils import load_config as load_deploy_config  # noqa: E402

from mavit_mm.tooling.config import load_config  # noqa: E402
from mavit_mm.tooling.model_builder import build_model  # noqa: E402

DEPLOY = REPO_ROOT / 'configs' / 'deploy'
SEG_CONFIGS = {'upernet': 'configs/demo/upernet_mavit-t_demo-shapes.py',
               'sem_fpn': 'configs/demo/fpn_mavit-t_demo-shapes.py'}
DETECTORS = {'mask_rcnn': MASK_RCNN_CONFIG,
             'retinanet': 'configs/demo/retinanet_mavit-t_fpn_demo-shapes.py',
             'cascade': 'configs/demo/cascade-mask-rcnn_mavit-t_fpn_ms-3x_demo-shapes.py'}
# Validation images each runtime infers and evaluates: two, so that the
# evaluation loops over images and a metric pools more than one; each image is
# a full pass through both runtimes at the deploy config's size.
NUM_VAL = 2
# Except the static 512x512 UperNet: one image (a forward of the published
# UperNet-T at 512x512 takes 3 s on one core, and each image takes four); the
# dynamic cases loop over images and pool.
STATIC_SEG_IMAGES = 1
# Detections are compared one to one down to the configs' 0.05 score threshold:
# with mavit_mm.deploy's RPN, R-CNN and dense-head rewrites the graphs keep
# exactly what mmdet keeps (mmdeploy's own rewrites differ under about 0.3).
DET_SCORE_THR = 0.05
SCORE_TOLERANCE = 0.01
MASK_IOU_EACH, MASK_IOU_MEAN = 0.95, 0.99
# The detectors are not trained: training until a detector finds something
# took minutes a run (RetinaNet's best scores on an AMD EPYC went 0.028, 0.013,
# 0.08, 0.29 after 60, 80, 100, 120 iterations). Fixed-seed weights with the
# classification layers drawn wider instead (``SCORING_LAYERS``: name suffix,
# weight std, bias; ``None``: the layer's own) give detections worth comparing
# by construction, of varied classes, boxes and scores. Measured (AMD EPYC):
# RetinaNet's sigmoid classifier, its bias low so that most anchors stay below
# DET_SCORE_THR, 80 detections an image scored 0.05-0.18, all 4 classes;
# Mask R-CNN's softmax classifier, 20 an image (its max_per_img) scored
# 0.44-0.84, 3 classes, every mask non-empty.
SCORING_LAYERS = {'retinanet': [('retina_cls', 1.0, -5.0)],
                  'mask_rcnn': [('fc_cls', 0.03, None)],
                  'cascade': [('fc_cls', 0.03, None)]}
# The metric comparison needs ground truth the model finds: the validation
# annotations are rewritten as every other one of PyTorch's best detections,
# GT_PER_IMAGE an image, so that false positives rank between the true ones
# and its bbox mAP is high but not 1 (the best ones alone gave exactly 1, which
# no ranking change would move); ONNX Runtime must reach the same mAP through
# mmdeploy's evaluation.
GT_PER_IMAGE = 5

# mmdeploy v1.3.1's stock ONNX Runtime configs, as their _base_ chains resolve
# (configs/mmseg/segmentation_onnxruntime_static-512x512.py and
# configs/mmdet/instance-seg/instance-seg_onnxruntime_dynamic.py in its
# repository, which its wheel does not ship): a user who follows mmdeploy's
# own docs uses exactly these settings. Ours of the same name resolve to them
# key for key (test_our_deploy_configs_are_mmdeploys_stock_ones), so the export
# and evaluation checks below, run on ours, hold for the stock ones too.
STOCK_ONNX = dict(type='onnx', export_params=True, keep_initializers_as_inputs=False,
                  opset_version=11, save_file='end2end.onnx', input_names=['input'],
                  optimize=True)
STOCK = {
    'segmentation_onnxruntime_static-512x512': dict(
        onnx_config=dict(STOCK_ONNX, output_names=['output'], input_shape=[512, 512]),
        codebase_config=dict(type='mmseg', task='Segmentation', with_argmax=True),
        backend_config=dict(type='onnxruntime')),
    'detection_onnxruntime_dynamic': dict(
        onnx_config=dict(
            STOCK_ONNX, output_names=['dets', 'labels'], input_shape=None,
            dynamic_axes={'input': {0: 'batch', 2: 'height', 3: 'width'},
                          'dets': {0: 'batch', 1: 'num_dets'},
                          'labels': {0: 'batch', 1: 'num_dets'}}),
        codebase_config=dict(type='mmdet', task='ObjectDetection', model_type='end2end',
                             post_processing=dict(
                                 score_threshold=0.05, confidence_threshold=0.005,
                                 iou_threshold=0.5, max_output_boxes_per_class=200,
                                 pre_top_k=5000, keep_top_k=100, background_label_id=-1)),
        backend_config=dict(type='onnxruntime')),
    'instance-seg_onnxruntime_dynamic': dict(
        onnx_config=dict(
            STOCK_ONNX, output_names=['dets', 'labels', 'masks'], input_shape=None,
            dynamic_axes={'input': {0: 'batch', 2: 'height', 3: 'width'},
                          'dets': {0: 'batch', 1: 'num_dets'},
                          'labels': {0: 'batch', 1: 'num_dets'},
                          'masks': {0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'}}),
        codebase_config=dict(type='mmdet', task='ObjectDetection', model_type='end2end',
                             post_processing=dict(
                                 score_threshold=0.05, confidence_threshold=0.005,
                                 iou_threshold=0.5, max_output_boxes_per_class=200,
                                 pre_top_k=5000, keep_top_k=100, background_label_id=-1,
                                 export_postprocess_mask=False)),
        backend_config=dict(type='onnxruntime')),
}


def deploy_config(name: str) -> str:
    """Ours: configs/deploy/NAME.py."""
    return str(DEPLOY / f'{name}.py')


@pytest.mark.parametrize('name', sorted(STOCK))
def test_our_deploy_configs_are_mmdeploys_stock_ones(name):
    """Ours of a stock name resolve, through mmdeploy's own loader, to exactly
    mmdeploy's settings: nothing added, dropped or changed."""
    (ours,) = load_deploy_config(deploy_config(name))
    assert ours.to_dict() == STOCK[name]


@pytest.fixture(scope='module')
def data_roots(tmp_path_factory):
    """The tests read the validation splits alone: one training image each
    (64 took 0.6 s a worker), which the validation images do not depend on
    (each split draws from a stream of its own)."""
    from mavit_mm.data.synthetic import make_ade20k_dataset, make_coco_dataset
    root = tmp_path_factory.mktemp('deploy_data')
    return {'ade20k': make_ade20k_dataset(root / 'ade20k', num_train=1, num_val=NUM_VAL,
                                          seed=0)['root'],
            # The images of the detectors' shared runs (shared_runs.py).
            'coco': make_coco_dataset(root / 'coco', **dict(COCO_SETTINGS, num_train=1,
                                                             num_val=NUM_VAL))['root']}


def model_config(config: str, data_root, out_dir: Path) -> str:
    """The demo config on the test's data, dumped as a standalone file."""
    cfg = load_config(REPO_ROOT / config)
    retarget_data_root(cfg, str(data_root))
    path = out_dir / Path(config).name
    cfg.dump(str(path))
    return str(path)


def fixed_seed_model(config: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(load_config(config))
    model.init_weights()
    return model


def fixed_seed_checkpoint(config: str, path: Path) -> str:
    torch.save({'state_dict': fixed_seed_model(config).state_dict()}, path)
    return str(path)


def export_in_a_fresh_process(deploy_cfg: str, model_cfg: str, checkpoint: str, image: str,
                              work_dir: Path) -> dict:
    """``work_dir/end2end.onnx`` written as tools/deploy.py writes it: a fresh
    process that imports mmdeploy first and loads the model config after it,
    with nothing set. It never imports mavit_mm itself: the config's
    custom_imports do. Returns the graph's opset, op types and op domains."""
    script = textwrap.dedent(f"""
        import json, sys
        from mmdeploy.apis import torch2onnx
        torch2onnx({image!r}, {str(work_dir)!r}, 'end2end.onnx', {deploy_cfg!r}, {model_cfg!r},
                   {checkpoint!r}, device='cpu')
        import onnx
        model = onnx.load({str(work_dir / 'end2end.onnx')!r})
        print(json.dumps(dict(opset=model.opset_import[0].version,
                              ops=sorted({{n.op_type for n in model.graph.node}}),
                              domains=sorted({{n.domain for n in model.graph.node}}))))
    """)
    result = subprocess.run([sys.executable, '-c', script], cwd=work_dir.parent,
                            capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def export(deploy_cfg: str, model_cfg: str, checkpoint: str, image: str, work_dir: Path,
           exported: bool = False):
    """mmdeploy's export (unless ``exported``: already in ``work_dir``), then its
    task processor, the ONNX Runtime model and the PyTorch model."""
    if not exported:
        torch2onnx(image, str(work_dir), 'end2end.onnx', deploy_cfg, model_cfg, checkpoint,
                   device='cpu')
    deploy, model = load_deploy_config(deploy_cfg, model_cfg)
    processor = build_task_processor(model, deploy, 'cpu')
    backend = processor.build_backend_model(
        [str(work_dir / 'end2end.onnx')],
        data_preprocessor_updater=processor.update_data_preprocessor)
    return processor, backend, processor.build_pytorch_model(checkpoint)


def evaluate(processor, model, work_dir: Path, num_images: int | None = None) -> dict:
    """What mmdeploy's tools/test.py computes for ``model`` (on the first
    ``num_images`` of the test split, default all)."""
    from copy import deepcopy
    loader_cfg = deepcopy(processor.model_cfg.test_dataloader)
    loader_cfg['batch_size'] = 1
    if num_images is not None:
        loader_cfg['dataset']['indices'] = num_images
    input_shape = get_input_shape(processor.deploy_cfg)
    if input_shape:   # a static model takes its one size (tools/test.py --cfg-options)
        for step in loader_cfg['dataset']['pipeline']:
            if step['type'] == 'Resize':
                step.update(scale=tuple(input_shape), keep_ratio=False)
    loader_cfg['dataset'] = processor.build_dataset(loader_cfg['dataset'])
    loader = processor.build_dataloader(loader_cfg)
    runner = processor.build_test_runner(model, str(work_dir), dataloader=loader)
    return runner.test()


def val_images(data_root, kind: str):
    folder = Path(data_root) / ('images/validation' if kind == 'ade20k' else 'val')
    return sorted(str(p) for p in folder.glob('*.jpg'))[:NUM_VAL]


# -- segmentation --------------------------------------------------------------
SEG_CASES = [('upernet', 'segmentation_onnxruntime_dynamic'),
             ('sem_fpn', 'segmentation_onnxruntime_dynamic'),
             ('upernet', 'segmentation_onnxruntime_static-512x512')]
# The case exported as mmdeploy's tools/deploy.py exports, in a fresh process
# (export_in_a_fresh_process): the others export in this one.
FRESH_PROCESS_CASE = ('upernet', 'segmentation_onnxruntime_dynamic')


# Each case a group of its own (not the module's, which its module fixture
# would give it: helpers/xdist_groups.py), so that the cases spread over the
# workers.
@pytest.mark.parametrize('pipeline,deploy_name', [
    pytest.param(pipeline, name, id=f'{pipeline}-{name}',
                 marks=pytest.mark.xdist_group(f'deploy-{pipeline}-{name}'))
    for pipeline, name in SEG_CASES])
def test_segmentation_matches_onnxruntime(pipeline, deploy_name, data_roots, tmp_path):
    """Labels agree on >= 99.9 % of pixels and mIoU within 0.5 points. UperNet's
    pyramid pooling on a 16x16 map (scales 3 and 6) at 512x512 is where
    mmdeploy's own rewrite is not exact. The FRESH_PROCESS_CASE exports as
    tools/deploy.py does, with nothing set but the model config, into standard
    ONNX ops at the stock opset and without approximate adaptive pooling."""
    config = model_config(SEG_CONFIGS[pipeline], data_roots['ade20k'], tmp_path)
    checkpoint = fixed_seed_checkpoint(config, tmp_path / 'model.pth')
    images = val_images(data_roots['ade20k'], 'ade20k')
    fresh_process = (pipeline, deploy_name) == FRESH_PROCESS_CASE
    if fresh_process:
        graph = export_in_a_fresh_process(deploy_config(deploy_name), config, checkpoint,
                                          images[0], tmp_path / 'onnx')
        assert graph['opset'] == 11
        assert graph['domains'] == [''], graph      # standard ONNX ops only
        assert 'AveragePool' not in graph['ops']    # no approximate adaptive pooling
    processor, backend, pytorch = export(deploy_config(deploy_name), config, checkpoint,
                                         images[0], tmp_path / 'onnx', exported=fresh_process)
    num_images = STATIC_SEG_IMAGES if get_input_shape(processor.deploy_cfg) else len(images)
    # Labels at the network's output: the ONNX graph's argmax against PyTorch's
    # encode_decode (both resized to the input), recorded as the evaluations
    # below run each image through each runtime (one forward each, not two).
    ort_calls = record_calls(backend.wrapper, 'forward', lambda outputs, inputs: (
        inputs[backend.input_name].clone(), outputs[backend.output_names[0]].clone()))
    torch_calls = record_calls(pytorch, 'encode_decode', lambda logits, inputs, metas: (
        inputs.clone(), logits.argmax(dim=1)))
    ort_metrics = evaluate(processor, backend, tmp_path / 'eval_ort', num_images)
    torch_metrics = evaluate(processor, pytorch, tmp_path / 'eval_torch', num_images)
    assert len(ort_calls) == len(torch_calls) == num_images, (len(ort_calls), len(torch_calls))
    agree = []
    for (ort_input, got), (torch_input, expected) in zip(ort_calls, torch_calls):
        assert torch.equal(ort_input, torch_input)   # the same preprocessed input
        assert got.shape[-2:] == expected.shape[-2:], (got.shape, expected.shape)
        agree.append((got.reshape(expected.shape) == expected).float().mean().item())
    assert min(agree) >= 0.999, agree
    assert abs(ort_metrics['mIoU'] - torch_metrics['mIoU']) <= 0.5, (ort_metrics, torch_metrics)


def record_calls(owner, name: str, keep) -> list:
    """From now on every call of ``owner.<name>`` (an instance's method) runs
    as before and appends ``keep(result, *args, **kwargs)`` to the list returned."""
    calls, original = [], getattr(owner, name)

    def recorded(*args, **kwargs):
        result = original(*args, **kwargs)
        calls.append(keep(result, *args, **kwargs))
        return result
    setattr(owner, name, recorded)
    return calls


# -- detectors ------------------------------------------------------------------
def scoring_checkpoint(pipeline: str, config: str, path: Path) -> str:
    """Fixed-seed weights with SCORING_LAYERS drawn wider (see there)."""
    model = fixed_seed_model(config)
    generator = torch.Generator().manual_seed(1)
    layers = [(name, module, std, bias) for name, module in model.named_modules()
              for suffix, std, bias in SCORING_LAYERS[pipeline] if name.endswith(suffix)]
    assert layers, f'no {SCORING_LAYERS[pipeline]} in {pipeline}'
    with torch.no_grad():
        for _, module, std, bias in layers:
            module.weight.copy_(torch.randn(module.weight.shape, generator=generator) * std)
            if bias is not None:
                module.bias.fill_(bias)
    torch.save({'state_dict': model.state_dict()}, path)
    return str(path)


def detector_config(pipeline: str, data_root: Path, tmp_path: Path) -> tuple[str, Path]:
    """The demo detector's config on a data root of its own: the validation
    images of ``data_root`` and an annotation file the test writes
    (``write_ground_truth``) before it evaluates. Returns (config, that file)."""
    root = tmp_path / 'coco'
    (root / 'annotations').mkdir(parents=True)
    (root / 'val').symlink_to(Path(data_root) / 'val', target_is_directory=True)
    return model_config(DETECTORS[pipeline], root, tmp_path), \
        root / 'annotations' / 'instances_val.json'


def write_ground_truth(path: Path, source: Path, detections: dict, with_masks: bool) -> int:
    """``source``'s COCO annotations with every other one of PyTorch's
    2 * GT_PER_IMAGE best detections of each image as its objects (boxes in
    image pixels, masks as RLE, or the box's outline without masks); the
    number of objects written."""
    import pycocotools.mask as mask_util
    coco = json.loads(source.read_text())
    category_ids = [category['id'] for category in coco['categories']]
    image_ids = {image['file_name']: image['id'] for image in coco['images']}
    coco['annotations'] = []
    for name, instances in detections.items():
        best = instances.scores.argsort(descending=True)[:2 * GT_PER_IMAGE:2]
        for index in best.tolist():
            x1, y1, x2, y2 = instances.bboxes[index].tolist()
            annotation = dict(id=len(coco['annotations']) + 1, image_id=image_ids[name],
                              category_id=category_ids[int(instances.labels[index])],
                              bbox=[x1, y1, x2 - x1, y2 - y1], area=(x2 - x1) * (y2 - y1),
                              iscrowd=0,
                              # The demo pipeline loads masks: a box's own outline.
                              segmentation=[[x1, y1, x2, y1, x2, y2, x1, y2]])
            if with_masks:
                rle = mask_util.encode(np.asfortranarray(
                    instances.masks[index].numpy().astype(np.uint8)))
                annotation['segmentation'] = dict(size=rle['size'],
                                                  counts=rle['counts'].decode())
                annotation['area'] = float(mask_util.area(rle))
            coco['annotations'].append(annotation)
    path.write_text(json.dumps(coco))
    return len(coco['annotations'])


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    from mmcv.ops import bbox_overlaps
    return bbox_overlaps(a, b)


def mask_iou(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.bool(), b.bool()
    union = (a | b).sum().item()
    return 1.0 if union == 0 else (a & b).sum().item() / union


DET_CASES = [('mask_rcnn', 'instance-seg_onnxruntime_dynamic'),
             ('mask_rcnn', 'instance-seg_onnxruntime_static'),
             ('retinanet', 'detection_onnxruntime_dynamic'),
             # 32 s of a 2-core make test, on Mask R-CNN's deployment path with
             # two more R-CNN stages: under make test-slow.
             pytest.param('cascade', 'instance-seg_onnxruntime_dynamic',
                          marks=pytest.mark.slow)]


@pytest.mark.parametrize('pipeline,deploy_name', DET_CASES)
def test_detector_matches_onnxruntime(pipeline, deploy_name, data_roots, tmp_path):
    """Every PyTorch detection above DET_SCORE_THR has an ORT one of its class
    with box IoU >= 0.99 and a score within 0.01 (and, with masks, mask IoU >=
    0.95, 0.99 on average); bbox (and segm) mAP within 0.5 points through mmdeploy's evaluation,
    against PyTorch's own best detections as ground truth (GT_PER_IMAGE)."""
    config, annotations = detector_config(pipeline, data_roots['coco'], tmp_path)
    checkpoint = scoring_checkpoint(pipeline, config, tmp_path / 'model.pth')
    images = val_images(data_roots['coco'], 'coco')
    processor, backend, pytorch = export(deploy_config(deploy_name), config,
                                         checkpoint, images[0], tmp_path / 'onnx')
    with_masks = deploy_name.startswith('instance-seg')
    # PyTorch's detections first: the evaluation reads its ground truth from them.
    torch_inputs = record_calls(pytorch, 'forward', lambda results, inputs, **_: inputs.clone())
    detections = {}
    for image in images:
        data, _ = processor.create_input(image, get_input_shape(processor.deploy_cfg))
        with torch.no_grad():
            detections[Path(image).name] = pytorch.test_step(data)[0].pred_instances
    written = write_ground_truth(annotations, Path(data_roots['coco']) / 'annotations' /
                                 'instances_val.json', detections, with_masks)
    assert written == GT_PER_IMAGE * len(images)
    # ONNX Runtime's, recorded as its evaluation runs each image (one forward an
    # image, not two), on the input PyTorch had (checked).
    ort_runs = record_calls(backend, 'forward', lambda results, inputs, **_: [
        (Path(sample.img_path).name, inputs.clone(), sample.pred_instances.clone())
        for sample in results])
    ort_metrics = evaluate(processor, backend, tmp_path / 'eval_ort')
    ort_detections = {name: (inputs, got) for run in ort_runs for name, inputs, got in run}
    assert sorted(ort_detections) == sorted(detections), (sorted(ort_detections), detections)
    compared, masks_drawn, mask_ious = 0, 0, []
    for (name, expected), pytorch_input in zip(detections.items(), torch_inputs):
        ort_input, got = ort_detections[name]
        assert torch.equal(ort_input, pytorch_input), name   # the same preprocessed input
        # A detection within SCORE_TOLERANCE of the score threshold, or of the
        # lowest score of a list cut at max_per_img, may have its ONNX Runtime
        # twin just the other side of the cut.
        floor = max(DET_SCORE_THR, expected.scores.min().item()) if len(expected) else 1.0
        keep = expected.scores >= floor + SCORE_TOLERANCE
        ious = box_iou(expected.bboxes[keep], got.bboxes)
        for row, index in enumerate(keep.nonzero().flatten().tolist()):
            same_class = got.labels == expected.labels[index]
            candidates = (ious[row] >= 0.99) & same_class & \
                ((got.scores - expected.scores[index]).abs() <= SCORE_TOLERANCE)
            if not candidates.any():
                same = ious[row].where(same_class, ious.new_tensor(-1.0))
                best = int(same.argmax())
                raise AssertionError(
                    f'{name}: PyTorch detection of class '
                    f'{int(expected.labels[index])}, score {float(expected.scores[index]):.4f}, '
                    f'box {expected.bboxes[index].tolist()} has no ONNX Runtime match; the '
                    f'nearest of its class: IoU {float(same[best]):.4f}, score '
                    f'{float(got.scores[best]):.4f}, box {got.bboxes[best].tolist()}')
            if with_masks:
                match = int(candidates.nonzero()[0])
                mask_ious.append(mask_iou(expected.masks[index], got.masks[match]))
                masks_drawn += bool(expected.masks[index].any())
            compared += 1
    # What the construction promises: many detections, of several classes and
    # scores, and (with masks) masks that are not empty.
    every = torch.cat([d.scores for d in detections.values()])
    labels = torch.cat([d.labels for d in detections.values()])
    assert compared >= 10 * len(images), f'{compared} detections above {DET_SCORE_THR}'
    assert labels.unique().numel() >= 3 and every.max() - every.min() >= 0.1, (labels, every)
    assert not with_masks or masks_drawn >= compared // 2, (masks_drawn, compared)
    # An untrained mask head draws speckled masks, where the runtimes' RoIAlign
    # rounding flips a pixel now and then: a mask's IoU may dip to MASK_IOU_EACH
    # (a trained one's stayed above 0.99), their mean may not.
    if with_masks:
        assert min(mask_ious) >= MASK_IOU_EACH and np.mean(mask_ious) >= MASK_IOU_MEAN, \
            sorted(mask_ious)[:5]
    torch_metrics = evaluate(processor, pytorch, tmp_path / 'eval_torch')
    for key in ('coco/bbox_mAP', 'coco/segm_mAP') if with_masks else ('coco/bbox_mAP',):
        assert 0.2 <= torch_metrics[key] < 1.0, (key, torch_metrics)
        assert abs(ort_metrics[key] - torch_metrics[key]) <= 0.005, (key, ort_metrics,
                                                                      torch_metrics)


# -- the backbone alone ---------------------------------------------------------
def test_backbone_exports_with_dynamic_shapes_under_the_default_exporter(tmp_path,
                                                                         monkeypatch):
    """torch 2.13's default (dynamo) exporter; one ONNX file serves two sizes
    within 1e-4 of PyTorch. ``mala_impl='triton'`` runs the fused kernels
    (here in Triton's interpreter), but an exported graph gets the PyTorch
    path, under the default exporter and the TorchScript one: no exported
    format holds them. (One model for the three checks: its interpreted
    forward and a dynamo export are the expensive parts.)"""
    import onnx
    import onnxruntime as ort

    from mavit_mm.models.mavit import MAViT
    from mavit_mm.ops.mala import dispatch as mala_dispatch
    monkeypatch.setenv('TRITON_INTERPRET', '1')
    calls = []
    original = mala_dispatch._triton_mala
    monkeypatch.setattr(mala_dispatch, '_triton_mala',
                        lambda *args: calls.append(1) or original(*args))
    torch.manual_seed(0)
    # MAViT-T's widths and heads with a block in stages 2 and 3: both block
    # types (MALA, softmax attention), each with several heads, between every
    # stage's downsampling and output norm; the exporter traces them in 2/3 of
    # the time of a block a stage (MALA's 1-head stage 1 and softmax's stage 4
    # run the same code), and the interpreter runs one MALA call, not two.
    depths = [0, 1, 1, 0]
    model = MAViT('t', depths=depths, mala_impl='triton').eval()
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 64))
    assert calls, 'the kernels should run outside export'
    calls.clear()
    sizes = [(64, 96), (96, 128)]
    path = tmp_path / 'mavit_t.onnx'
    # Sizes in multiples of 32 (the backbone's stride), batch 1.
    height, width = (torch.export.Dim(name, min=1, max=128) for name in ('height', 'width'))
    torch.onnx.export(model, (torch.randn(1, 3, *sizes[0]),), str(path),
                      input_names=['image'],
                      dynamic_shapes={'x': {2: 32 * height, 3: 32 * width}})
    assert not calls, 'the fused kernels ran during export'
    graph = onnx.load(str(path))
    assert not [n for n in graph.graph.node if n.domain not in ('', 'ai.onnx')]
    # PyTorch's outputs: the same weights on the PyTorch path.
    reference = MAViT('t', depths=depths, mala_impl='torch').eval()
    reference.load_state_dict(model.state_dict())
    session = ort.InferenceSession(str(path), providers=['CPUExecutionProvider'])
    for size in sizes:
        image = torch.randn(1, 3, *size)
        with torch.no_grad():
            expected = reference(image)
        got = session.run(None, {'image': image.numpy()})
        assert len(got) == len(expected)
        for out, ref in zip(got, expected):
            assert out.shape == tuple(ref.shape)
            np.testing.assert_allclose(out, ref.numpy(), rtol=0, atol=1e-4)

    path = tmp_path / 'mavit_torchscript.onnx'
    torch.onnx.export(model, (torch.randn(1, 3, 64, 64),), str(path), dynamo=False,
                      opset_version=17)
    assert not calls, 'the fused kernels ran during export'
    assert not [n.op_type for n in onnx.load(str(path)).graph.node
                if n.domain not in ('', 'ai.onnx')]
