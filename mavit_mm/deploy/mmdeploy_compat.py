"""mmdeploy 1.3.1 on torch 2.13, and exact exports of MAViT pipelines: the fixes
that docs/deployment.md ("What makes it work on torch 2.13") explains, applied
once by :func:`activate`:

* mmdeploy's calls of ``torch.onnx.export`` get the TorchScript exporter
  (``dynamo=False``), which runs its symbolics and rewriters;
* its rewriter context removes exactly the fx wraps it added (``KeyError: -1``);
* ``symbolic_opset9._cast_Long``, which its RoIAlign symbolic imports, is provided;
* :func:`exact_adaptive_avg_pool2d` replaces its ``adaptive_avg_pool2d`` rewrite,
  which is adaptive pooling only where the size divides;
* the RPN, one-stage and R-CNN post-processing rewrites keep mmdet's candidates
  and class-aware NMS, and the cascade's refinement takes class-specific
  regression (each says what mmdeploy's own does instead).

MAViT's own ops need no rewrite: an export takes their plain formulas
(:mod:`mavit_mm.ops.triton_support`'s export policy).
"""
from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence

import torch
import torch.nn.functional as F

_ACTIVE = False


def exact_adaptive_avg_pool2d(x: torch.Tensor,
                              output_size: int | Sequence[int]) -> torch.Tensor:
    """``F.adaptive_avg_pool2d(x, output_size)`` from ops every ONNX opset has.

    Bin ``i`` of ``n`` inputs into ``o`` outputs spans ``[floor(i n / o),
    ceil((i + 1) n / o))``, as in PyTorch; its mean is a difference of
    cumulative sums divided by its length. The sizes may be traced (dynamic
    shapes): nothing here is fixed at export time but ``output_size``.
    """
    if isinstance(output_size, int):
        output_size = (output_size, output_size)
    out = x
    for dim, size in zip((2, 3), output_size):
        if size is not None:
            out = _adaptive_mean(out, dim, int(size))
    return out


def _adaptive_mean(x: torch.Tensor, dim: int, out_size: int) -> torch.Tensor:
    length = x.shape[dim]
    index = torch.arange(out_size, device=x.device)
    start = torch.div(index * length, out_size, rounding_mode='floor')
    end = torch.div((index + 1) * length + out_size - 1, out_size, rounding_mode='floor')
    # Sums in fp32 at least; a leading zero so that a bin is end - start.
    sums = torch.cumsum(x.float(), dim)
    zero = torch.zeros_like(sums.narrow(dim, 0, 1))
    sums = torch.cat([zero, sums], dim)
    shape = [1] * x.dim()
    shape[dim] = out_size
    counts = (end - start).to(sums.dtype).reshape(shape)
    means = (sums.index_select(dim, end) - sums.index_select(dim, start)) / counts
    return means.to(x.dtype)


def _cast_long(g, input, non_blocking):
    """The symbolic torch 2.13 dropped from ``symbolic_opset9``."""
    from torch.onnx import _C_onnx
    return g.op('Cast', input, to_i=_C_onnx.TensorProtoDataType.INT64)


def _torchscript_for_mmdeploy(export):
    @functools.wraps(export)
    def wrapper(*args, **kwargs):
        if 'dynamo' not in kwargs and _called_from_mmdeploy():
            kwargs['dynamo'] = False
        return export(*args, **kwargs)
    wrapper.__mavit_mm_compat__ = True
    return wrapper


def _called_from_mmdeploy() -> bool:
    caller = sys._getframe(2).f_globals.get('__name__', '')
    return caller == 'mmdeploy' or caller.startswith('mmdeploy.')


def _fix_fx_wrap_bookkeeping() -> None:
    from mmdeploy.core.rewriters import function_rewriter
    rewriter = function_rewriter.FunctionRewriter
    if getattr(rewriter.exit, '__mavit_mm_compat__', False):
        return
    wrapped = function_rewriter._wrapped_fns_to_patch
    if not isinstance(wrapped, dict):       # a torch whose bookkeeping is a list
        return
    original_enter, original_exit = rewriter.enter, rewriter.exit

    @functools.wraps(original_enter)
    def enter(self, *args, **kwargs):
        self._mavit_mm_fx_wrap_keys = set(wrapped)
        return original_enter(self, *args, **kwargs)

    @functools.wraps(original_exit)
    def exit(self):
        for key in set(wrapped) - getattr(self, '_mavit_mm_fx_wrap_keys', set(wrapped)):
            del wrapped[key]
        self._ori_fx_wrap_num = len(wrapped)   # nothing left for mmdeploy to pop
        return original_exit(self)

    exit.__mavit_mm_compat__ = True
    rewriter.enter, rewriter.exit = enter, exit


def _register_rewriters() -> None:
    from mmdeploy.core import FUNCTION_REWRITER
    from mmdeploy.utils import IR

    # For every ONNX backend; a rewriter with a checker wins over mmdeploy's
    # default (non-adaptive) one.
    @FUNCTION_REWRITER.register_rewriter(
        func_name='torch.nn.functional.adaptive_avg_pool2d', ir=IR.ONNX)
    def adaptive_avg_pool2d__exact(input, output_size):
        return exact_adaptive_avg_pool2d(input, output_size)


def _score_columns(scores: torch.Tensor, groups: torch.Tensor, num_groups: int) -> torch.Tensor:
    """(..., boxes, 1) scores spread to one column per group, -1 (never kept)
    in the others: ONNX's per-class NonMaxSuppression over these columns is NMS
    within each group only (mmdet's ``batched_nms`` by level or class)."""
    return torch.where(F.one_hot(groups, num_groups).bool(), scores, scores.new_tensor(-1.0))


def _class_aware_nms(boxes: torch.Tensor, columns: torch.Tensor, cfg,
                     score_threshold: float = 0.0, min_size: float = -1):
    """mmdet's class-aware NMS with its test ``cfg`` (``nms``, ``max_per_img``) as
    ONNX's per-class NonMaxSuppression over the score ``columns``. Boxes not wider
    and taller than ``min_size`` get -1 (never kept) first, as mmdet's
    ``min_bbox_size`` drops them; a negative ``min_size`` keeps all."""
    from mmdeploy.mmcv.ops import multiclass_nms
    if min_size >= 0:
        valid = (((boxes[..., 2] - boxes[..., 0]) > min_size)
                 & ((boxes[..., 3] - boxes[..., 1]) > min_size))
        columns = torch.where(valid.unsqueeze(-1), columns, columns.new_tensor(-1.0))
    return multiclass_nms(boxes, columns, cfg.max_per_img, nms_type=cfg.nms.get('type'),
                          iou_threshold=cfg.nms.iou_threshold, score_threshold=score_threshold,
                          pre_top_k=-1, keep_top_k=cfg.max_per_img)


def _register_rpn_rewriter() -> None:
    """mmdet's RPN post-processing in the ONNX graph, exactly: NMS per FPN level
    (``batched_nms`` with level ids, every score kept) as ONNX's per-class NMS with
    one score column per level. mmdeploy's runs one NMS over all levels and drops
    scores under 0.05."""
    from mmdeploy.codebase.mmdet.deploy import gather_topk, pad_with_value_if_necessary
    from mmdeploy.core import FUNCTION_REWRITER
    from mmdeploy.utils import IR, is_dynamic_shape

    @FUNCTION_REWRITER.register_rewriter(
        func_name='mmdet.models.dense_heads.rpn_head.RPNHead.predict_by_feat', ir=IR.ONNX)
    def rpn_head__predict_by_feat__per_level(self, cls_scores, bbox_preds, score_factors=None,
                                             batch_img_metas=None, cfg=None, rescale=False,
                                             with_nms=True, **kwargs):
        ctx = FUNCTION_REWRITER.get_context()
        cfg = self.test_cfg if cfg is None else cfg
        batch = cls_scores[0].shape[0]
        priors = self.prior_generator.grid_priors(
            [score.shape[-2:] for score in cls_scores], device=cls_scores[0].device)
        static = not is_dynamic_shape(ctx.cfg)
        pre_topk = cfg.get('nms_pre', -1)
        level_boxes, level_scores, level_ids = [], [], []
        for level, (score, delta, prior) in enumerate(zip(cls_scores, bbox_preds, priors)):
            score = score.detach().permute(0, 2, 3, 1)
            score = (score.reshape(batch, -1, 1).sigmoid() if self.use_sigmoid_cls
                     else score.reshape(batch, -1, 2).softmax(-1)[..., :1])
            delta = delta.detach().permute(0, 2, 3, 1).reshape(batch, -1,
                                                               self.bbox_coder.encode_size)
            prior = (prior.data if static else prior).unsqueeze(0)
            if pre_topk > 0:
                # topk needs at least k entries: pad (scores 0) as mmdeploy does.
                score = pad_with_value_if_necessary(score, 1, pre_topk, 0.)
                delta = pad_with_value_if_necessary(delta, 1, pre_topk)
                prior = pad_with_value_if_necessary(prior, 1, pre_topk)
                _, index = score.squeeze(2).topk(pre_topk)
                delta, score = gather_topk(delta, score, inds=index, batch_size=batch,
                                           is_batched=True)
                prior = gather_topk(prior, inds=index, batch_size=batch, is_batched=False)
            level_boxes.append(self.bbox_coder.decode(
                prior, delta, max_shape=batch_img_metas[0]['img_shape']))
            level_scores.append(score)
            level_ids.append(torch.full_like(score[..., 0], level, dtype=torch.long))
        boxes = torch.cat(level_boxes, dim=1)
        scores = torch.cat(level_scores, dim=1)
        if not with_nms:
            return boxes, scores
        per_level = _score_columns(scores, torch.cat(level_ids, dim=1), len(cls_scores))
        return _class_aware_nms(boxes, per_level, cfg, min_size=cfg.get('min_bbox_size', -1))


def _register_dense_head_rewriter() -> None:
    """mmdet's one-stage post-processing (RetinaNet's) in the ONNX graph, exactly.

    Per FPN level the ``nms_pre`` best (anchor, class) pairs over ``score_thr``,
    each a box of its own with one score column per class, then class-aware NMS,
    ``min_bbox_size`` and ``max_per_img``. mmdeploy's keeps the best *anchors*
    with all their classes, caps each class at ``max_output_boxes_per_class`` and
    skips ``min_bbox_size``. Heads that change mmdet's per-image steps or weigh
    scores by a score factor (FCOS, ATSS, ...), and calls without NMS, keep mmdeploy's.
    """
    from mmdeploy.codebase.mmdet.models.dense_heads.base_dense_head import (
        base_dense_head__predict_by_feat as mmdeploy_predict_by_feat,
    )
    from mmdeploy.core import FUNCTION_REWRITER
    from mmdeploy.utils import IR, is_dynamic_shape
    from mmdet.models.dense_heads.base_dense_head import BaseDenseHead
    from mmdet.structures.bbox import get_box_tensor

    def as_mmdet_runs_it(head, score_factors, with_nms) -> bool:
        return (score_factors is None and with_nms
                and not getattr(head.loss_cls, 'custom_cls_channels', False)
                and all(getattr(type(head), name) is getattr(BaseDenseHead, name)
                        for name in ('_predict_by_feat_single', '_bbox_post_process')))

    @FUNCTION_REWRITER.register_rewriter(
        func_name='mmdet.models.dense_heads.base_dense_head.BaseDenseHead.predict_by_feat',
        ir=IR.ONNX)
    def base_dense_head__predict_by_feat__pairs(self, cls_scores, bbox_preds, score_factors=None,
                                                batch_img_metas=None, cfg=None, rescale=False,
                                                with_nms=True, **kwargs):
        if not as_mmdet_runs_it(self, score_factors, with_nms):
            return mmdeploy_predict_by_feat(self, cls_scores, bbox_preds, score_factors,
                                            batch_img_metas, cfg, rescale, with_nms, **kwargs)
        ctx = FUNCTION_REWRITER.get_context()
        cfg = self.test_cfg if cfg is None else cfg
        batch, num_classes = cls_scores[0].shape[0], self.num_classes
        img_shape = batch_img_metas[0]['img_shape']
        priors = self.prior_generator.grid_priors(
            [score.shape[-2:] for score in cls_scores], dtype=bbox_preds[0].dtype,
            device=bbox_preds[0].device)
        static = not is_dynamic_shape(ctx.cfg)
        nms_pre = cfg.get('nms_pre', -1)
        level_boxes, level_scores, level_labels = [], [], []
        for score, delta, prior in zip(cls_scores, bbox_preds, priors):
            score = score.detach().permute(0, 2, 3, 1).reshape(batch, -1, self.cls_out_channels)
            score = score.sigmoid() if self.use_sigmoid_cls else score.softmax(-1)[..., :-1]
            dim = self.bbox_coder.encode_size
            delta = delta.detach().permute(0, 2, 3, 1).reshape(batch, -1, dim)
            prior = get_box_tensor(prior)
            prior = (prior.data if static else prior).unsqueeze(0).expand(batch, -1, -1)
            pairs = score.reshape(batch, -1)              # (anchor, class) pairs, class fastest
            if nms_pre > 0:
                pairs, index = pairs.topk(nms_pre)          # mmdeploy caps k at the size
            else:
                index = torch.arange(pairs.shape[1], device=pairs.device).expand(batch, -1)
            anchor = torch.div(index, num_classes, rounding_mode='floor')
            level_labels.append(index - anchor * num_classes)
            level_scores.append(pairs)
            level_boxes.append(self.bbox_coder.decode(
                prior.gather(1, anchor.unsqueeze(-1).expand(-1, -1, prior.shape[-1])),
                delta.gather(1, anchor.unsqueeze(-1).expand(-1, -1, dim)),
                max_shape=img_shape))
        boxes = get_box_tensor(torch.cat(level_boxes, dim=1))
        scores = torch.cat(level_scores, dim=1).unsqueeze(-1)
        columns = _score_columns(scores, torch.cat(level_labels, dim=1), num_classes)
        return _class_aware_nms(boxes, columns, cfg, cfg.get('score_thr', 0.0),
                                cfg.get('min_bbox_size', -1))


def _register_rcnn_rewriter() -> None:
    """mmdet's R-CNN post-processing in the ONNX graph, exactly: with class-specific
    box regression (Mask R-CNN's) every (RoI, class) pair keeps its own box, with
    one score column per class, so ONNX's per-class NMS is mmdet's class-aware NMS.
    mmdeploy's gives every class the box of the RoI's best class and adds a pre-NMS
    top-k. Class-agnostic heads share one box per RoI, as in mmdet."""
    from mmdeploy.core import FUNCTION_REWRITER
    from mmdeploy.utils import IR
    from mmdet.structures.bbox import get_box_tensor

    @FUNCTION_REWRITER.register_rewriter(
        func_name='mmdet.models.roi_heads.bbox_heads.bbox_head.BBoxHead.predict_by_feat',
        ir=IR.ONNX)
    def bbox_head__predict_by_feat__class_boxes(self, rois, cls_scores, bbox_preds,
                                                batch_img_metas, rcnn_test_cfg=None,
                                                rescale=False):
        assert rois.ndim == 3, 'only models with a batch dimension export'
        batch = cls_scores.shape[0]
        num_classes = self.num_classes
        img_shape = batch_img_metas[0]['img_shape']
        scores = (self.loss_cls.get_activation(cls_scores) if self.custom_cls_channels
                  else F.softmax(cls_scores, dim=-1))[..., :num_classes]    # (B, N, C)
        if bbox_preds is None:   # no regression: the RoIs, clipped to the image
            boxes = rois[..., 1:]
            limit = boxes.new_tensor([img_shape[1], img_shape[0]] * 2)
            boxes = torch.minimum(boxes.clamp(min=0), limit)
        else:
            boxes = get_box_tensor(self.bbox_coder.decode(rois[..., 1:], bbox_preds,
                                                          max_shape=img_shape))
        if not self.reg_class_agnostic and bbox_preds is not None:
            boxes = boxes.reshape(batch, -1, self.bbox_coder.encode_size)  # (B, N * C, 4)
            labels = torch.arange(num_classes, device=scores.device).repeat(scores.shape[1])
            scores = _score_columns(scores.reshape(batch, -1, 1), labels, num_classes)
        return _class_aware_nms(boxes, scores, rcnn_test_cfg, rcnn_test_cfg.score_thr)


def _register_cascade_rewriter() -> None:
    """mmdet's Cascade R-CNN box refinement in the ONNX graph, for class-specific
    regression too (the published cascade heads'): between stages each RoI moves
    by the deltas of its best class (``argmax`` over the stage's scores without
    background, as mmdet's ``regress_by_class``); the stages' scores are averaged
    and the last stage's head predicts, as in mmdet. mmdeploy's asserts
    class-agnostic heads."""
    from mmdeploy.core import FUNCTION_REWRITER
    from mmdeploy.utils import IR
    from mmdet.structures.bbox import get_box_tensor

    @FUNCTION_REWRITER.register_rewriter(
        func_name='mmdet.models.roi_heads.cascade_roi_head.CascadeRoIHead.predict_bbox',
        ir=IR.ONNX)
    def cascade_roi_head__predict_bbox__by_class(self, x, batch_img_metas, rpn_results_list,
                                                 rcnn_test_cfg, rescale=False, **kwargs):
        proposals = rpn_results_list[0]                     # (B, N, 5): boxes, score
        batch, num = proposals.shape[:2]
        image_index = torch.arange(batch, device=proposals.device, dtype=proposals.dtype)
        image_index = image_index.view(-1, 1, 1).expand(batch, num, 1)
        boxes = proposals[..., :4]
        max_shape = batch_img_metas[0]['img_shape']
        stage_scores = []
        for stage in range(self.num_stages):
            rois = torch.cat([image_index, boxes], dim=-1).reshape(-1, 5)
            results = self._bbox_forward(stage, x, rois, **kwargs)
            cls_score = results['cls_score'].reshape(batch, num, -1)
            bbox_pred = results['bbox_pred'].reshape(batch, num, -1)
            stage_scores.append(cls_score)
            if stage == self.num_stages - 1:
                break
            head = self.bbox_head[stage]
            if not head.reg_class_agnostic:
                if head.custom_activation:
                    cls_score = head.loss_cls.get_activation(cls_score)
                label = cls_score[..., :-1].argmax(dim=-1)               # (B, N)
                size = head.bbox_coder.encode_size
                index = label[..., None, None].expand(batch, num, 1, size)
                bbox_pred = bbox_pred.reshape(batch, num, -1, size).gather(2, index)
                bbox_pred = bbox_pred.squeeze(2)
            boxes = get_box_tensor(head.bbox_coder.decode(boxes, bbox_pred,
                                                          max_shape=max_shape))
        rois = torch.cat([image_index, boxes], dim=-1)
        return self.bbox_head[-1].predict_by_feat(
            rois=rois, cls_scores=sum(stage_scores) / len(stage_scores), bbox_preds=bbox_pred,
            batch_img_metas=batch_img_metas, rcnn_test_cfg=rcnn_test_cfg, rescale=rescale)


def activate() -> None:
    """Apply the fixes above (once); needs mmdeploy importable."""
    global _ACTIVE
    if _ACTIVE:
        return
    import torch.onnx.symbolic_opset9 as opset9
    if not hasattr(opset9, '_cast_Long'):
        opset9._cast_Long = _cast_long
    if not getattr(torch.onnx.export, '__mavit_mm_compat__', False):
        torch.onnx.export = _torchscript_for_mmdeploy(torch.onnx.export)
    _fix_fx_wrap_bookkeeping()
    _register_rewriters()
    _register_rpn_rewriter()
    _register_dense_head_rewriter()
    _register_rcnn_rewriter()
    _register_cascade_rewriter()
    _ACTIVE = True


def activate_if_mmdeploy() -> bool:
    """:func:`activate` now if mmdeploy has been imported, else right after it
    is (a model config loaded before ``import mmdeploy`` in the same process);
    nothing at all for a process that never imports mmdeploy."""
    if 'mmdeploy' in sys.modules:
        activate()
    elif not any(isinstance(finder, _ActivateAfterMmdeploy) for finder in sys.meta_path):
        sys.meta_path.insert(0, _ActivateAfterMmdeploy())
    return _ACTIVE


class _ActivateAfterMmdeploy(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of the real ``mmdeploy`` package
    so that :func:`activate` runs once the package has been executed."""

    def find_spec(self, name, path=None, target=None):
        if name != 'mmdeploy':
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_activate(module):
            exec_module(module)
            activate()
        spec.loader.exec_module = exec_and_activate
        return spec
