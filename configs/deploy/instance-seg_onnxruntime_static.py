# Mask R-CNN / Cascade Mask R-CNN + MAViT to ONNX Runtime, static input.
# RoIAlign and NMS export as the standard ONNX ops (RoiAlign,
# NonMaxSuppression): no custom-op library is needed. Masks leave the graph
# at RoI resolution and are pasted outside it, as mmdeploy does by default.
_base_ = ['./_base_/onnxruntime_opset11.py', './_base_/detection_post_processing.py']
onnx_config = dict(output_names=['dets', 'labels', 'masks'])
codebase_config = dict(post_processing=dict(export_postprocess_mask=False))
