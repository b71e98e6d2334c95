"""The main job (tools/main_job.py) without its training: the bars and the
exit status on fake summaries, the job config, the evaluation progress hook,
and the pictures (real visualisers, on tiny data and a freshly initialised
checkpoint; training curves from a written mmengine JSON log)."""
import json
import logging

import numpy as np
import pytest
from helpers.drawing import NOTHING_DRAWN, drawn_difference
from helpers.tools import load_tool, make_tiny_data, save_initialised_checkpoint, write_tiny_config

from mavit_mm.tooling.config import load_config
from mavit_mm.tooling.demo_jobs import DEMO_JOBS

main_job = load_tool('main_job')

DETECTOR_HEADLINE = ['coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50']
SEGMENTOR_HEADLINE = ['mIoU', 'mAcc', 'aAcc']


def fake_result(headline, untrained, trained):
    return dict(headline_metrics=list(headline), untrained=dict(zip(headline, untrained)),
                trained=dict(zip(headline, trained)),
                improved=all(a > b for a, b in zip(trained, untrained)))


def fake_results(bbox_map=0.62, bbox_map50=0.93, miou=94.0):
    return {
        'mask_rcnn': fake_result(DETECTOR_HEADLINE, [0.001, 0.002, 0.0, 0.0],
                                 [bbox_map, bbox_map50, 0.55, 0.9]),
        'upernet': fake_result(SEGMENTOR_HEADLINE, [2.9, 19.4, 8.3], [miou, 98.0, 99.4]),
    }


def test_mask_rcnn_bars_are_map50_0_8_and_map_0_5():
    assert ('mask_rcnn', 'coco/bbox_mAP_50', 0.8) in main_job.BARS
    assert ('mask_rcnn', 'coco/bbox_mAP', 0.5) in main_job.BARS
    assert all(name in main_job.JOBS for name, _, _ in main_job.BARS)
    assert all(name in DEMO_JOBS for name in main_job.JOBS)


def test_results_above_the_bars_pass():
    verdict = main_job.check_results(fake_results())
    assert verdict['passed'] and verdict['failures'] == []
    assert [(b['metric'], b['passed']) for b in verdict['bars']] == [
        ('coco/bbox_mAP_50', True), ('coco/bbox_mAP', True)]


@pytest.mark.parametrize('bbox_map,bbox_map50,failing', [
    (0.45, 0.93, 'coco/bbox_mAP'),      # mAP below 0.5
    (0.62, 0.79, 'coco/bbox_mAP_50'),   # mAP@50 below 0.8
])
def test_a_detector_below_a_bar_fails(bbox_map, bbox_map50, failing):
    verdict = main_job.check_results(fake_results(bbox_map, bbox_map50))
    assert not verdict['passed']
    assert len(verdict['failures']) == 1
    assert f'mask_rcnn: trained {failing} ' in verdict['failures'][0]
    assert 'below the bar' in verdict['failures'][0]
    assert [b['metric'] for b in verdict['bars'] if not b['passed']] == [failing]


def test_a_model_not_beating_its_baseline_fails_even_above_the_bars():
    results = fake_results()
    results['upernet']['trained']['mIoU'] = 2.0  # below the untrained 2.9
    verdict = main_job.check_results(results)
    assert not verdict['passed']
    assert verdict['failures'] == [
        'upernet: trained mIoU 2.000 is not above the untrained baseline 2.900']


def test_bars_of_models_not_run_are_left_out():
    results = fake_results()
    del results['mask_rcnn']  # --only upernet
    verdict = main_job.check_results(results)
    assert verdict['passed'] and verdict['bars'] == []
    # A bar on a metric the run did not report fails rather than passing silently.
    verdict = main_job.check_results(fake_results(), bars=[('upernet', 'mDice', 50.0)])
    assert verdict['failures'] == ['upernet: trained mDice missing is below the bar 50']


def test_summary_table_shows_the_bars():
    table = main_job.summary_table(fake_results(bbox_map=0.45))
    lines = table.splitlines()
    assert lines[0].split() == ['model', 'metric', 'untrained', 'trained', 'bar']
    row = next(line for line in lines if 'coco/bbox_mAP ' in line)
    assert row.split()[-3:] == ['>=', '0.5', 'FAILED']
    row = next(line for line in lines if 'coco/bbox_mAP_50' in line)
    assert row.split()[-3:] == ['>=', '0.8', 'ok']


@pytest.mark.parametrize('bbox_map,exit_status', [(0.62, 0), (0.45, 1)])
def test_exit_status_and_summary_follow_the_bars(monkeypatch, tmp_path, capsys, bbox_map,
                                                 exit_status):
    results = fake_results(bbox_map=bbox_map)
    for name, result in results.items():
        result.update(train_seconds=1.0, test_seconds=1.0, picture_seconds=1.0,
                      pictures=dict(ground_truth_vs_prediction=f'{name}/gt_vs_pred.png',
                                    training_curves=f'{name}/curves.png'))
    monkeypatch.setattr(main_job, 'ensure_data', lambda kinds, regenerate: None)
    monkeypatch.setattr(main_job, 'run_job',
                        lambda name, work_root, max_iters: results[name])
    assert main_job.main(['--work-dir', str(tmp_path)]) == exit_status
    out, err = capsys.readouterr()
    summary = json.loads((tmp_path / 'summary.json').read_text())
    assert summary['passed'] is (exit_status == 0)
    assert {b['metric']: b['passed'] for b in summary['bars']} == {
        'coco/bbox_mAP_50': True, 'coco/bbox_mAP': exit_status == 0}
    assert 'mask_rcnn ground truth | prediction: mask_rcnn/gt_vs_pred.png' in out
    assert 'upernet training curves: upernet/curves.png' in out
    if exit_status:
        assert 'FAILED' in err and 'coco/bbox_mAP 0.450 is below the bar 0.5' in err
        assert summary['failures'] == ['mask_rcnn: trained coco/bbox_mAP 0.450 is below the '
                                       'bar 0.5']
    else:
        assert 'PASSED' in out and summary['failures'] == []


def test_job_config_validates_during_training_and_shows_progress(tmp_path):
    config = DEMO_JOBS[main_job.JOBS[1]].config
    path = main_job.write_job_config(config, tmp_path, max_iters=40)
    cfg = load_config(path)
    assert cfg.train_cfg.max_iters == 40
    assert cfg.train_cfg.val_interval == 40 // main_job.VALIDATIONS_DURING_TRAINING
    assert cfg.train_cfg.val_begin == 1
    hooks = [hook['type'] for hook in cfg.custom_hooks]
    assert 'EvaluateBeforeTrainingHook' in hooks and 'EvaluationProgressHook' in hooks
    assert 'mavit_mm.engine.hooks' in cfg.custom_imports['imports']


class _FakeRunner:
    def __init__(self, batches):
        self.val_dataloader = self.test_dataloader = list(range(batches))
        self.logger = logging.getLogger('fake_runner')


def test_evaluation_progress_hook_reports_batches_and_eta(caplog):
    from mavit_mm.engine.hooks import EvaluationProgressHook
    runner = _FakeRunner(3)
    hook = EvaluationProgressHook(min_interval_s=0)
    with caplog.at_level(logging.INFO, logger='fake_runner'):
        # The Runner calls every hook method with keywords; training stays silent.
        hook.before_train_epoch(runner)
        hook.after_train_iter(runner, batch_idx=0, data_batch=None, outputs=None)
        hook.before_test_epoch(runner)
        for index in range(3):
            hook.after_test_iter(runner, index)
    lines = [record.getMessage() for record in caplog.records]
    assert lines[0] == 'Evaluating (test): ? images in 3 batches'
    assert [line.split(',')[0] for line in lines[1:]] == [
        'Evaluating (test): 1/3 batches', 'Evaluating (test): 2/3 batches',
        'Evaluating (test): 3/3 batches']
    assert all('eta 0:00:0' in line for line in lines[1:])
    assert lines[-1].endswith('computing the metrics')
    # Rate-limited: only the last batch of a quick loop is reported.
    caplog.clear()
    hook = EvaluationProgressHook(min_interval_s=3600)
    with caplog.at_level(logging.INFO, logger='fake_runner'):
        hook.before_val_epoch(runner)
        for index in range(3):
            hook.after_val_iter(runner, index)
    assert [r.getMessage().split(',')[0] for r in caplog.records][1:] == [
        'Evaluating (val): 3/3 batches']


# --- pictures -------------------------------------------------------------------------

@pytest.fixture(scope='module')
def tiny_setup(tmp_path_factory):
    """Tiny data, the demo configs on it, and a freshly initialised checkpoint
    of each model (no training: the drawing is what is tested)."""
    pytest.importorskip('mmcv.ops', reason='mmcv with its C++ ops is needed')
    root = tmp_path_factory.mktemp('main_job_pictures')
    roots = make_tiny_data(root / 'data')
    setup = {}
    for name in ('mask_rcnn', 'upernet'):
        config = write_tiny_config(name, roots, root / 'configs')
        cfg = load_config(config)
        if name == 'mask_rcnn':  # a few boxes and masks to draw, not 100
            cfg.model.test_cfg.rcnn.max_per_img = 3
            cfg.dump(str(config))
        setup[name] = (config, save_initialised_checkpoint(cfg, root / f'{name}.pth'))
    return setup


def read_png(path):
    from PIL import Image
    with Image.open(path) as image:
        assert image.format == 'PNG'
        return np.asarray(image.convert('RGB'))


@pytest.mark.parametrize('name', ['mask_rcnn', 'upernet'])
def test_ground_truth_beside_prediction(tiny_setup, tmp_path, name):
    from mavit_mm.tooling.pictures import draw_validation_samples
    config, checkpoint = tiny_setup[name]
    # Threshold 0: the untrained detector's low-scored boxes are drawn too.
    drawn = draw_validation_samples(config, checkpoint, tmp_path / 'pictures', num_images=2,
                                    score_thr=0.0, title=name)
    assert len(drawn['images']) == 2  # the tiny validation split has 2 images
    data_dir = config.parent.parent / 'data' / ('coco/val' if name == 'mask_rcnn'
                                                else 'ade20k/images/validation')
    for path in drawn['images']:
        picture = read_png(path)
        source = read_png_or_jpeg(data_dir / f'{path.stem.split("_", 1)[1]}.jpg')
        height, width = source.shape[:2]
        assert picture.shape == (height, 2 * width, 3)  # ground truth | prediction
        for half in (picture[:, :width], picture[:, width:]):
            # Something was drawn on each half (boxes, masks, labels or class overlays).
            assert drawn_difference(half, source) > NOTHING_DRAWN
    sheet = read_png(drawn['sheet'])
    assert sheet.shape[0] > 300 and sheet.shape[1] > 300 and sheet.std() > 20


def read_png_or_jpeg(path):
    from PIL import Image
    with Image.open(path) as image:
        return np.asarray(image.convert('RGB'))


def write_training_log(work_dir, timestamp='20260101_000000'):
    """An mmengine vis_data JSON log: a baseline, 20 iterations, two validations."""
    vis_data = work_dir / timestamp / 'vis_data'
    vis_data.mkdir(parents=True)
    records = [{'coco/bbox_mAP': 0.0, 'coco/bbox_mAP_50': 0.0, 'data_time': 0.1, 'time': 1.0,
                'step': 0}]
    for step in range(2, 21, 2):
        records.append({'lr': 1e-4, 'data_time': 0.01, 'loss': 5.0 / step,
                        'loss_cls': 2.0 / step, 'decode.loss_ce': 1.0 / step,
                        'decode.acc_seg': 50.0, 'time': 1.0, 'iter': step, 'memory': 0,
                        'step': step})
        if step % 10 == 0:
            records.append({'coco/bbox_mAP': step / 40, 'coco/bbox_mAP_50': step / 25,
                            'data_time': 0.1, 'time': 1.0, 'step': step})
    (vis_data / f'{timestamp}.json').write_text(
        ''.join(json.dumps(record) + '\n' for record in records))


def test_training_curves_from_the_json_log(tmp_path):
    from mavit_mm.tooling.pictures import plot_training_curves, training_curves
    write_training_log(tmp_path / 'work')
    curves = training_curves(tmp_path / 'work')
    assert curves['losses']['loss'] == (list(range(2, 21, 2)), [5.0 / s for s in range(2, 21, 2)])
    assert set(curves['losses']) == {'loss', 'loss_cls', 'decode.loss_ce'}
    assert curves['metrics']['coco/bbox_mAP'] == ([0, 10, 20], [0.0, 0.25, 0.5])
    out = plot_training_curves(tmp_path / 'work', tmp_path / 'curves.png',
                               ['coco/bbox_mAP', 'coco/bbox_mAP_50'],
                               final_metrics={'coco/bbox_mAP': 0.5}, final_step=20,
                               bars={'coco/bbox_mAP': 0.5})
    picture = read_png(out)
    assert picture.shape[0] >= 300 and picture.shape[1] >= 800
    assert picture.std() > 10 and len(np.unique(picture.reshape(-1, 3), axis=0)) > 50


def test_training_curves_need_a_training_log(tmp_path):
    from mavit_mm.tooling.pictures import plot_training_curves
    with pytest.raises(FileNotFoundError, match='no training log'):
        plot_training_curves(tmp_path, tmp_path / 'curves.png', ['mIoU'])


def test_reference_minutes_come_from_the_newest_record_of_the_whole_job(tmp_path, monkeypatch):
    """Records of part of the job (--only, --max-iters) or that do not parse
    set no reference: the estimates would be far off, or make demo fail."""
    import json
    shipped = main_job.reference_minutes()     # the committed records: a whole job
    assert set(shipped) == set(main_job.JOBS) and all(m > 0 for m in shipped.values())

    schedules = main_job.demo_schedules()

    def record(date, seconds, iters=None, jobs=main_job.JOBS):
        iters = iters or schedules
        results = {name: dict(train_seconds=seconds, test_seconds=6, picture_seconds=6,
                              max_iters=iters[name]) for name in jobs}
        return json.dumps(dict(date=date, summary=dict(results=results)))

    monkeypatch.setattr(main_job, 'RECORDS', tmp_path)
    assert main_job.reference_minutes() == {}
    (tmp_path / 'main-job-cpu-1.json').write_text(record('2026-01-01', 108))
    (tmp_path / 'main-job-cpu-2.json').write_text(record('2026-02-01', 48, jobs=['upernet']))
    (tmp_path / 'main-job-cpu-3.json').write_text(
        record('2026-03-01', 48, iters={'mask_rcnn': 2, 'upernet': 2}))
    (tmp_path / 'main-job-cpu-4.json').write_text('{"date": "2026-04-01", "summ')
    assert main_job.reference_minutes() == {'mask_rcnn': 2.0, 'upernet': 2.0}


def test_time_left_scales_the_reference_by_this_machine():
    jobs = list(main_job.JOBS)
    minutes = {'mask_rcnn': 3.0, 'upernet': 1.5}
    first, second = jobs
    # Twice as slow as the reference on the first model: twice its minutes left.
    assert main_job.time_left(jobs, 0, 2 * minutes[first], minutes) == \
        f', about {2 * minutes[second]:.0f} min left'
    assert main_job.time_left(jobs, 1, 1.0, minutes) == ''  # nothing left


@pytest.mark.parametrize('value', ['0', '-1'])
def test_max_iters_below_one_is_refused(value, capsys):
    """0 ran the whole schedule (taken as not given); -1 failed inside train.py."""
    with pytest.raises(SystemExit) as exit_info:
        main_job.parse_args(['--max-iters', value])
    assert exit_info.value.code == 2 and '--max-iters' in capsys.readouterr().err


def test_a_job_reads_only_its_own_runs_of_a_reused_work_dir(tmp_path, monkeypatch):
    """The work dir keeps the runs of earlier jobs (``work_dirs/main_job`` by
    default): the baseline, the validations and the summary come from this
    job's training run alone."""
    work_root = tmp_path / 'jobs'
    earlier = work_root / 'mask_rcnn' / '20250101_000000' / 'vis_data'
    earlier.mkdir(parents=True)
    (earlier / '20250101_000000.json').write_text(''.join(json.dumps(record) + '\n' for record in (
        {'coco/bbox_mAP': 0.9, 'coco/bbox_mAP_50': 0.9, 'step': 0},
        {'coco/bbox_mAP': 0.7, 'coco/bbox_mAP_50': 0.8, 'step': 15})))

    def fake_tool(tool, *args, log_name, work_dir):
        if tool == 'train.py':
            write_training_log(work_dir, timestamp='20260101_000000')
        else:
            test_run = work_dir / '20260101_000100'
            test_run.mkdir()
            (test_run / '20260101_000100.json').write_text(
                json.dumps({'coco/bbox_mAP': 0.5, 'coco/bbox_mAP_50': 0.8, 'step': 20}) + '\n')
        return 1.0

    monkeypatch.setattr(main_job, 'run_tool', fake_tool)
    monkeypatch.setattr(main_job, 'draw_pictures', lambda *args, **kwargs: {})
    summary = main_job.run_job('mask_rcnn', work_root, 20)
    assert sorted(summary['validation_by_iteration'], key=int) == ['0', '10', '20']
    assert summary['untrained']['coco/bbox_mAP'] == 0.0


def test_the_baseline_under_ema_evaluates_the_model_training_starts_from():
    """mmengine's EMAHook copies the model in before_run, before the weights are
    initialised, and swaps that copy in for a validation: the baseline would
    score the stale copy, not the model training starts from."""
    import types

    import torch
    from mmengine.hooks import EMAHook

    from mavit_mm.engine.hooks import EvaluateBeforeTrainingHook
    model = torch.nn.Linear(3, 2)
    runner = types.SimpleNamespace(model=model, iter=0, logger=logging.getLogger('test'))
    ema = EMAHook()
    ema.before_run(runner)                  # the copy, before the weights are set
    with torch.no_grad():
        model.weight.fill_(0.5)             # init_weights / a Pretrained load
    seen = []

    class ValLoop:
        def run(self):
            ema.before_val_epoch(runner)    # the validation's swap
            seen.append(model.weight.detach().clone())
            ema.after_val_epoch(runner)

    runner.hooks, runner.val_loop = [ema], ValLoop()
    EvaluateBeforeTrainingHook().before_train(runner)
    assert torch.equal(seen[0], torch.full((2, 3), 0.5))
    assert torch.equal(model.weight, torch.full((2, 3), 0.5))


def test_after_emas_swap_back_the_backbone_computes_with_the_training_weights(monkeypatch):
    """EMAHook swaps the averaged weights in for a validation and the training
    weights back after it through param.data, which the cached derived weights
    (folded kernels) cannot see; the model stays in eval mode after the last
    validation. The hook the tools add beside an EMAHook starts them afresh."""
    import types

    import torch
    from mmengine.config import Config
    from mmengine.hooks import EMAHook

    from mavit_mm import MAViT
    from mavit_mm.engine.hooks import FreshDerivedWeightsAfterEMAHook
    from mavit_mm.tooling import runner_setup
    torch.manual_seed(0)
    model = MAViT('t', depths=[1, 1, 1, 1], mala_impl='torch')
    runner = types.SimpleNamespace(model=model, iter=0, epoch=0)
    ema = EMAHook()
    ema.before_run(runner)
    with torch.no_grad():
        for param in ema.ema_model.module.parameters():
            param.mul_(0.5)                      # the average drifts from the model
    image = torch.randn(1, 3, 64, 64)
    ema.before_val_epoch(runner)
    model.eval()
    with torch.no_grad():
        model(image)                             # caches built from the EMA weights
    ema.after_val_epoch(runner)
    FreshDerivedWeightsAfterEMAHook().after_val_epoch(runner)
    fresh = MAViT('t', depths=[1, 1, 1, 1], mala_impl='torch').eval()
    fresh.load_state_dict(model.state_dict())
    with torch.no_grad():
        for ours, expected in zip(model(image), fresh(image)):
            assert torch.equal(ours, expected)
    # tools/train.py and tools/test.py add it beside an EMAHook, once.
    cfg = Config(dict(custom_hooks=[dict(type='mmengine.EMAHook')]))
    for _ in range(2):
        runner_setup.add_cache_reset_after_ema(cfg)
    assert [hook['type'] for hook in cfg.custom_hooks] == ['mmengine.EMAHook',
                                                           'FreshDerivedWeightsAfterEMAHook']
