# Mask R-CNN / Cascade Mask R-CNN + MAViT to ONNX Runtime, dynamic batch, size
# and detections.
_base_ = ['./instance-seg_onnxruntime_static.py']
onnx_config = dict(
    dynamic_axes={
        'input': {0: 'batch', 2: 'height', 3: 'width'},
        'dets': {0: 'batch', 1: 'num_dets'},
        'labels': {0: 'batch', 1: 'num_dets'},
        'masks': {0: 'batch', 1: 'num_dets', 2: 'height', 3: 'width'},
    })
